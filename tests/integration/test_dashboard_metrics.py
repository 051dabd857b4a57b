"""Every metric the Grafana dashboard and the Prometheus rules query is one a real `kpd run`
exports, used as its type allows (rate() and increase() only over counters and histograms)."""

from __future__ import annotations

from deploy_queries import COUNTER_FUNCTIONS, all_selectors
from prometheus_client.parser import text_string_to_metric_families

# Series names each metric type exposes (a counter `x` is `x_total`; histogram `h` has buckets).
SERIES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "gauge": ("",),
    "summary": ("", "_sum", "_count"),
}
COUNTER_LIKE = {"counter", "histogram", "summary"}


def exported_series(metrics_text: str) -> dict[str, str]:
    """{series name: its family's type}, from the families /metrics declares (# TYPE lines
    count even before a labelled metric has a sample)."""
    return {
        family.name + suffix: family.type
        for family in text_string_to_metric_families(metrics_text)
        for suffix in SERIES.get(family.type, ("",))
    }


def test_dashboard_and_rules_query_only_exported_metrics(sidecar_factory) -> None:
    # Two workers, as deployed: their metrics are merged from files (multiprocess mode), where a
    # labelled family with no sample yet is not exported at all.
    sidecar = sidecar_factory("m", workers="2").start()
    with sidecar.client() as http:
        response = http.get("/metrics")
    assert response.status_code == 200
    exported = exported_series(response.text)
    assert exported["kpd_leader_restarts_total"] == "counter"
    assert exported["kpd_pop_request_seconds_bucket"] == "histogram"
    # No restart yet reads 0 on the dashboard, not "No data": each led shard's roles start at 0.
    restarts = {
        (s.labels["role"], s.labels["shard"], s.labels["reason"]): s.value
        for family in text_string_to_metric_families(response.text)
        if family.name == "kpd_leader_restarts"
        for s in family.samples
        if s.name == "kpd_leader_restarts_total"
    }
    assert set(restarts.values()) == {0.0}
    assert {key for key in restarts if key[0] != "standby"} == {
        (role, shard, "none") for role in ("delay", "pop") for shard in ("0", "1")
    }

    used = all_selectors()
    assert len(used) > 20
    unknown = sorted({(s.name, s.where) for s in used if s.name not in exported})
    assert unknown == [], f"queried but not exported: {unknown}"
    misused = sorted(
        (s.name, s.where)
        for s in used
        if COUNTER_FUNCTIONS & set(s.functions) and exported[s.name] not in COUNTER_LIKE
    )
    assert misused == [], f"rate()/increase() of a gauge: {misused}"
    raw_counters = sorted(
        (s.name, s.where)
        for s in used
        if exported[s.name] == "counter" and not COUNTER_FUNCTIONS & set(s.functions)
    )
    assert raw_counters == [], f"a raw counter plotted without rate(): {raw_counters}"
