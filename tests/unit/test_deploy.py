"""deploy/: the Grafana dashboard and the Prometheus alert rules are well formed and cover what
docs/operations.md ("Dashboards and alerts") promises. That each queried metric is one kpd
exports is checked against a real sidecar in tests/integration/test_dashboard_metrics.py.
"""

from __future__ import annotations

import re
from itertools import combinations

import promql_parser
import pytest
from deploy_queries import (
    dashboard,
    dashboard_exprs,
    parse,
    rule_exprs,
    rules,
    selectors,
    walk,
)

DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
PROVISIONED_UID = "kpd-prometheus"  # deploy/grafana/provisioning/datasources/prometheus.yml


def panels() -> list[dict]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def test_dashboard_shape() -> None:
    board = dashboard()
    assert board["uid"] == "kpd-overview" and board["title"] == "kpd"
    assert isinstance(board["schemaVersion"], int) and board["schemaVersion"] >= 39
    [variable] = board["templating"]["list"]
    assert variable["name"] == "DS_PROMETHEUS" and variable["type"] == "datasource"
    assert variable["query"] == "prometheus"
    assert variable["current"]["value"] == PROVISIONED_UID
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"


def test_every_panel_queries_the_prometheus_variable() -> None:
    for panel in panels():
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
            assert target["expr"].strip(), panel["title"]
        assert panel["description"], panel["title"]


def test_panels_fit_the_grid_without_overlap() -> None:
    boxes = []
    for panel in dashboard()["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["w"] > 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        assert grid["h"] > 0 and grid["y"] >= 0, panel["title"]
        boxes.append((panel["title"], grid))
    for (a, g), (b, h) in combinations(boxes, 2):
        apart = (
            g["x"] + g["w"] <= h["x"]
            or h["x"] + h["w"] <= g["x"]
            or g["y"] + g["h"] <= h["y"]
            or h["y"] + h["h"] <= g["y"]
        )
        assert apart, f"{a!r} overlaps {b!r}"


@pytest.mark.parametrize(("where", "expr"), sorted({**dashboard_exprs(), **rule_exprs()}.items()))
def test_every_expression_is_valid_promql(where: str, expr: str) -> None:
    parse(expr)  # raises on syntax and type errors (e.g. rate() of an instant vector)


@pytest.mark.parametrize(
    "bad", ["rate(kpd_pop_acked_total)", "sum(rate(x[5m])", "histogram_quantile(0.9)"]
)
def test_the_parser_refuses_broken_promql(bad: str) -> None:
    """The check above means something: the parser does refuse these."""
    with pytest.raises(ValueError):
        parse(bad)


def test_quantiles_aggregate_histogram_buckets_by_le() -> None:
    quantiles = 0
    for where, expr in {**dashboard_exprs(), **rule_exprs()}.items():
        for node, _ in walk(expr):
            if isinstance(node, promql_parser.Call) and node.func.name == "histogram_quantile":
                quantiles += 1
                inner = node.args[1]
                assert isinstance(inner, promql_parser.AggregateExpr), where
                assert "le" in inner.modifier.labels, where
                names = {s.name for s in selectors(where, inner.prettify())}
                assert names and all(n.endswith("_bucket") for n in names), where
    assert quantiles == 6  # lateness p50/p99, pop latency p50/p99, GC pause p99, the alert


# What the issue asks the dashboard to show, as the metric each panel must query.
REQUIRED_ON_DASHBOARD = {
    "kpd_delivery_lateness_seconds_bucket",
    "kpd_due_backlog",
    "kpd_schedules_pending",
    "kpd_schedules_delivered_total",
    "kpd_buffer_invalid_total",
    "kpd_pop_messages_total",
    "kpd_pop_acked_total",
    "kpd_pop_retried_total",
    "kpd_pop_dead_lettered_total",
    "kpd_pop_request_seconds_bucket",
    "kpd_shard_leader",
    "kpd_leader",
    "kpd_kafka_reachable",
    "kpd_loop_stalled_seconds",
    "kpd_leader_restarts_total",
}
# Each alert of the issue, and the metric it must watch.
REQUIRED_ALERTS = {
    "KpdDeliveryLatenessHigh": "kpd_delivery_lateness_seconds_bucket",
    "KpdDueBacklogGrowing": "kpd_due_backlog",
    "KpdNoLeader": "kpd_leader",
    "KpdShardWithoutLeader": "kpd_shard_leader",
    "KpdLoopStalled": "kpd_loop_stalled_seconds",
    "KpdDeadLetterRateRising": "kpd_pop_dead_lettered_total",
    "KpdKafkaUnreachable": "kpd_kafka_reachable",
}


def test_dashboard_covers_what_the_issue_asks() -> None:
    queried = {s.name for where, e in dashboard_exprs().items() for s in selectors(where, e)}
    assert sorted(REQUIRED_ON_DASHBOARD - queried) == []


def test_alerts_cover_what_the_issue_asks() -> None:
    watched = {
        where.removeprefix("alert "): {s.name for s in selectors(where, expr)}
        for where, expr in rule_exprs().items()
    }
    assert set(watched) == set(REQUIRED_ALERTS)
    for alert, metric in REQUIRED_ALERTS.items():
        assert metric in watched[alert], alert


def test_rule_fields() -> None:
    for rule in rules():
        name = rule["alert"]
        assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}, name
        assert re.fullmatch(r"Kpd[A-Z][A-Za-z]+", name), name
        assert promql_parser.parse_duration(rule["for"]).total_seconds() >= 60, name
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        assert set(rule["annotations"]) == {"summary", "description"}, name


def test_annotations_use_only_labels_the_expression_keeps() -> None:
    """`{{ $labels.x }}` renders empty unless the alert's series carry x (its by/on labels)."""
    for rule in rules():
        kept: set[str] = set()
        for node, _ in walk(rule["expr"]):
            modifier = getattr(node, "modifier", None)
            if isinstance(node, promql_parser.AggregateExpr) and modifier is not None:
                kept |= set(modifier.labels)
        used = set(re.findall(r"\$labels\.(\w+)", " ".join(rule["annotations"].values())))
        assert used <= kept, (rule["alert"], used - kept)
