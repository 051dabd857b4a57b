"""Dispatch lateness (kpd's own) beside end-to-end lateness, on a log with schedules that were
already overdue when they reached kpd; pop deliveries and schedules settled to kpd.invalid."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from audit_synthlog import arrived_late_log

from spark.audit import main

pytestmark = pytest.mark.spark


def percentiles(values: list[int]) -> dict[str, float]:
    return {n: float(np.percentile(values, q)) for n, q in (("p50", 50), ("p99", 99))}


def test_overdue_arrivals_are_late_end_to_end_but_not_by_dispatch(spark, tmp_path):
    log = arrived_late_log()
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(log.lines) + "\n")
    out = tmp_path / "out"
    # The gate counts dispatch lateness: no delivery took kpd over 1 s, so --max-late 0 passes.
    status = main(["--input", str(path), "--out", str(out), "--max-late", "0"])
    summary = json.loads((out / "summary.json").read_text())

    assert status == 0, summary["verdict"]
    assert summary["schema_version"] == 2
    overall = summary["overall"]
    # ... while 10 deliveries are 5-6 s late end to end, and would fail a gate on that figure.
    assert (overall["late"], overall["late_end_to_end"]) == (0, 10)
    assert summary["anomalies"] == {
        "early": 0,
        "late": 0,
        "missing": 0,  # gone-1 was settled to kpd.invalid: resolved, not missing
        "duplicates": 0,  # the pop message delivered twice is pop's at-least-once
        "malformed": 0,
    }
    assert pd.read_parquet(out / "late.parquet").empty

    every_lateness = [v for values in log.lateness.values() for v in values]
    every_dispatch = [v for values in log.dispatch.values() for v in values]
    end_to_end, dispatch = overall["lateness_ms"], overall["dispatch_lateness_ms"]
    assert end_to_end["p99"] > 5_000 and dispatch["p99"] < 50
    for stats, values in ((end_to_end, every_lateness), (dispatch, every_dispatch)):
        assert stats["count"] == len(values) == 111  # delay deliveries only, no pop ones
        assert (stats["min"], stats["max"]) == (min(values), max(values))
        assert stats["mean"] == pytest.approx(np.mean(values))
        for name, q in (("p50", 50), ("p95", 95), ("p99", 99), ("p999", 99.9)):
            assert stats[name] == pytest.approx(np.percentile(values, q)), name
    for target in ("orders", "emails"):
        by_target = summary["by_target"][target]
        assert by_target["dispatch_lateness_ms"]["p99"] == pytest.approx(
            np.percentile(log.dispatch[target], 99)
        )
    # Unknown enqueue time: dispatch lateness is the end-to-end one (30 ms here).
    emails = summary["by_target"]["emails"]
    assert emails["lateness_ms"]["max"] == emails["dispatch_lateness_ms"]["max"] == 30

    # Pop deliveries: counted per group and target, without lateness.
    workers = summary["by_group"]["workers"]
    assert workers["events"]["delivered"] == 2
    assert workers["lateness_ms"]["count"] == workers["dispatch_lateness_ms"]["count"] == 0
    assert summary["by_target"]["jobs"]["events"]["delivered"] == 2

    # Per minute, both measures: the first minute holds every overdue arrival.
    minutes = summary["lateness_per_minute"]
    assert sum(m["count"] for m in minutes) == 111
    delay = [r for r in log.records if r["event"] == "delivered" and r["due_ms"] is not None]
    first = [r for r in delay if r["at_ms"] < minutes[1]["minute_ms"]]
    late_first = [r["at_ms"] - r["due_ms"] for r in first]
    dispatch_first = [r["at_ms"] - max(r["due_ms"], r["enqueued_ms"]) for r in first]
    assert minutes[0]["count"] == len(first)
    assert minutes[0]["max_ms"] == max(late_first) > 5_000
    assert minutes[0]["dispatch_max_ms"] == max(dispatch_first) < 50
    assert minutes[0]["p99_ms"] == pytest.approx(percentiles(late_first)["p99"])
    assert minutes[0]["dispatch_p99_ms"] == pytest.approx(percentiles(dispatch_first)["p99"])

    html = (out / "report.html").read_text()
    assert "dispatch p99" in html and "late_end_to_end" in html
    assert sorted(re.findall(r'<img src="([^"]+)"', html)) == [
        "lateness_histogram.png",
        "lateness_over_time.png",
    ]


def test_late_threshold_gates_dispatch_lateness(spark, tmp_path):
    log = arrived_late_log()
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(log.lines) + "\n")
    out = tmp_path / "out"
    # 20 ms: the overdue arrivals dispatched 5..14 ms after arriving pass; the prompt ones
    # delivered 21..39 ms after due fail (38), and the 30 ms one with unknown enqueue time.
    threshold = 20
    status = main(["--input", str(path), "--out", str(out), "--max-late", "0",
                   "--late-threshold-ms", str(threshold)])  # fmt: skip
    summary = json.loads((out / "summary.json").read_text())
    dispatch = [v for values in log.dispatch.values() for v in values]
    expected = sum(v > threshold for v in dispatch)
    assert expected == 39
    assert (status, summary["anomalies"]["late"], summary["verdict"]["violations"]) == (
        2,
        expected,
        ["late"],
    )
    late = pd.read_parquet(out / "late.parquet")
    assert len(late) == expected
    assert (late["dispatch_lateness_ms"] > threshold).all()
    assert not late["id"].str.startswith("overdue").any()
    # Sorted by dispatch lateness, worst first; both measures listed.
    assert list(late["dispatch_lateness_ms"]) == sorted(late["dispatch_lateness_ms"], reverse=True)
    assert (late["lateness_ms"] >= late["dispatch_lateness_ms"]).all()
