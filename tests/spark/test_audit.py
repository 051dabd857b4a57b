"""The Spark delivery audit on synthetic logs with known anomalies: files, Parquet, real Kafka."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from audit_synthlog import T0, SyntheticLog, build_log, produce_log

from spark.audit import main
from spark.options import parse_time

pytestmark = pytest.mark.spark

LENIENT = [
    "--max-early",
    "1",
    "--max-missing",
    "1",
    "--max-duplicates",
    "1",
    "--max-malformed",
    "5",
]


def write_jsonl(log: SyntheticLog, path: Path) -> Path:
    path.write_text("\n".join(log.lines) + "\n\n")  # a trailing blank line is not a record
    return path


def run(spark, tmp_path: Path, *args: str) -> tuple[int, dict, Path]:
    out = tmp_path / "out"
    status = main([*args, "--out", str(out)])
    summary = json.loads((out / "summary.json").read_text())
    return status, summary, out


def ids(out: Path, name: str) -> list[str]:
    return sorted(pd.read_parquet(out / f"{name}.parquet")["id"])


def check_anomalies(summary: dict, out: Path, malformed: int = 5) -> None:
    assert summary["anomalies"] == {
        "early": 1,
        "late": 1,
        "missing": 1,
        "duplicates": 1,
        "malformed": malformed,
    }
    assert ids(out, "early") == ["early-1"]
    assert ids(out, "late") == ["late-1"]
    assert ids(out, "missing") == ["missing-1"]
    assert ids(out, "duplicates") == ["s3"]
    dup = pd.read_parquet(out / "duplicates.parquet").iloc[0]
    assert (dup["deliveries"], dup["target"], dup["nodes"]) == (2, "emails", "node-a,node-b")
    late = pd.read_parquet(out / "late.parquet").iloc[0]
    assert late["lateness_ms"] == 5_000
    assert pd.read_parquet(out / "early.parquet").iloc[0]["lateness_ms"] == -200


def check_counts(summary: dict, log: SyntheticLog) -> None:
    """Counts by event match the log, per target, per group and overall."""
    frame = pd.DataFrame(log.records)
    overall = summary["overall"]["events"]
    for event, n in frame["event"].value_counts().items():
        assert overall[event] == n, event
    for target, rows in frame.groupby("target"):
        assert summary["by_target"][target]["events"] == {
            e: int((rows["event"] == e).sum()) for e in overall
        }
    workers = summary["by_group"]["workers"]["events"]
    assert (workers["retried"], workers["dead-lettered"]) == (3, 1)
    assert set(summary["by_group"]) == {"workers"}
    assert summary["records"]["valid"] == len(log.records)
    assert summary["overall"]["pending"] == 1
    # Exact percentiles, same interpolation as numpy's default.
    for target, values in log.lateness.items():
        lat = summary["by_target"][target]["lateness_ms"]
        assert lat["count"] == len(values)
        assert lat["max"] == max(values)
        for name, q in (("p50", 50), ("p95", 95), ("p99", 99), ("p999", 99.9)):
            assert lat[name] == pytest.approx(np.percentile(values, q)), (target, name)
    every = [v for values in log.lateness.values() for v in values]
    assert summary["overall"]["lateness_ms"]["p99"] == pytest.approx(np.percentile(every, 99))


def test_jsonl_log_finds_exactly_the_injected_anomalies(spark, tmp_path, synthetic_log):
    path = write_jsonl(synthetic_log, tmp_path / "log.jsonl")
    status, summary, out = run(spark, tmp_path, "--input", str(path))

    assert status == 2  # defaults: no early, missing, duplicate or malformed allowed
    assert set(summary["verdict"]["violations"]) == {"early", "missing", "duplicates", "malformed"}
    check_anomalies(summary, out)
    check_counts(summary, synthetic_log)
    assert summary["malformed_by_reason"] == {
        "bad_json": 1,
        "not_an_object": 1,
        "missing_field:target": 1,
        "bad_type:due_ms": 1,
        "unknown_event": 1,
    }
    malformed = pd.read_parquet(out / "malformed.parquet")
    assert len(malformed) == 5 and malformed["source"].str.endswith("log.jsonl").all()
    assert summary["window"]["end_from"] == "log"
    assert summary["window"]["end_ms"] == max(r["at_ms"] for r in synthetic_log.records)
    minutes = summary["lateness_per_minute"]
    assert sum(m["count"] for m in minutes) == summary["overall"]["lateness_ms"]["count"]
    for key in (
        "schema_version",
        "source",
        "window",
        "params",
        "lateness_method",
        "records",
        "anomalies",
        "overall",
        "by_target",
        "by_group",
        "verdict",
        "listed",
    ):
        assert key in summary

    html = (out / "report.html").read_text()
    images = re.findall(r'<img src="([^"]+)"', html)
    assert sorted(images) == ["lateness_histogram.png", "lateness_over_time.png"]
    for image in images:
        assert (out / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "orders" in html and "emails" in html and "workers" in html


def test_thresholds_decide_the_exit_status(spark, tmp_path, synthetic_log):
    path = write_jsonl(synthetic_log, tmp_path / "log.jsonl")
    status, summary, _ = run(spark, tmp_path, "--input", str(path), *LENIENT)
    assert (status, summary["verdict"]["violations"]) == (0, [])
    status, summary, _ = run(spark, tmp_path, "--input", str(path), *LENIENT, "--max-late", "0")
    assert (status, summary["verdict"]["violations"]) == (2, ["late"])
    # A higher late threshold makes the 5 s delivery acceptable.
    status, summary, _ = run(
        spark,
        tmp_path,
        "--input",
        str(path),
        *LENIENT,
        "--max-late",
        "0",
        "--late-threshold-ms",
        "6000",
    )
    assert (status, summary["anomalies"]["late"]) == (0, 0)


def test_clean_log_passes(spark, tmp_path):
    log = build_log(anomalies=False)
    status, summary, out = run(spark, tmp_path, "--input", str(write_jsonl(log, tmp_path / "l")))
    assert status == 0
    assert set(summary["anomalies"].values()) == {0}
    assert pd.read_parquet(out / "missing.parquet").empty


def test_until_sets_the_end_and_the_window(spark, tmp_path, synthetic_log):
    path = write_jsonl(synthetic_log, tmp_path / "log.jsonl")
    # At T0+95 s, missing-1 (due T0+40 s) is still within its minute of grace: pending.
    until = T0 + 95_000
    status, summary, _ = run(spark, tmp_path, "--input", str(path), "--until", str(until), *LENIENT)
    assert status == 0
    assert summary["window"] == summary["window"] | {"end_ms": until, "end_from": "until"}
    assert summary["anomalies"]["missing"] == 0
    # Deliveries after the cut are out of the window.
    delivered = [r for r in synthetic_log.records if r["event"] == "delivered"]
    assert summary["overall"]["events"]["delivered"] == sum(r["at_ms"] <= until for r in delivered)
    iso = "2023-11-14T22:14:55Z"
    assert parse_time(iso) == until
    _, again, _ = run(
        spark,
        tmp_path,
        "--input",
        str(path),
        "--since",
        str(T0 + 20_000),
        "--until",
        iso,
        *LENIENT,
    )
    assert again["window"]["since_ms"] == T0 + 20_000
    assert again["records"]["valid"] < summary["records"]["valid"]


def test_parquet_typed_and_kafka_style_exports(spark, tmp_path, synthetic_log):
    columns = [
        "event",
        "id",
        "target",
        "due_ms",
        "at_ms",
        "enqueued_ms",
        "delivery_count",
        "node",
        "group",
        "partition",
        "offset",
        "reason",
    ]
    rows = [{c: r.get(c) for c in columns} for r in synthetic_log.records]
    rows.append({c: None for c in columns} | {"event": "delivered", "id": "no-target"})
    typed = tmp_path / "typed.parquet"
    pq.write_table(pa.Table.from_pylist(rows), typed)
    status, summary, out = run(spark, tmp_path, "--input", str(typed), *LENIENT)
    check_anomalies(summary, out, malformed=1)
    check_counts(summary, synthetic_log)
    assert status == 0

    # An export of raw Kafka records (a `value` column of JSON bytes), as a folder.
    folder = tmp_path / "kafka-export"
    folder.mkdir()
    values = [line.encode() for line in synthetic_log.lines]
    pq.write_table(pa.table({"value": pa.array(values, pa.binary())}), folder / "part-0.parquet")
    status, summary, out = run(spark, tmp_path, "--input", str(folder), *LENIENT)
    check_anomalies(summary, out)
    check_counts(summary, synthetic_log)


def test_usage_errors_exit_1(tmp_path, capsys):
    assert main(["--input", "x", "--out", str(tmp_path), "--since", "yesterday"]) == 1
    assert main(["--input", str(tmp_path / "absent.jsonl"), "--out", str(tmp_path)]) == 1
    assert main(["--help"]) == 0
    assert "usage" in capsys.readouterr().err


def test_audit_reads_the_log_from_kafka(spark, tmp_path, synthetic_log, kafka_bootstrap, new_topic):
    from confluent_kafka import Producer

    # Records carry their at_ms as Kafka timestamp (as the sidecar's would); no retention, since
    # those times are long past.
    topic = new_topic("delivery-log", partitions=3, config={"retention.ms": "-1"})
    produce_log(kafka_bootstrap, topic, synthetic_log)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topic, value=None, key=b"tombstone")  # no value: malformed, not a crash
    assert producer.flush(30) == 0

    status, summary, out = run(
        spark,
        tmp_path,
        "--bootstrap",
        kafka_bootstrap,
        "--topic",
        topic,
        *LENIENT,
        "--max-malformed",
        "6",
    )
    assert status == 0
    assert summary["source"]["kind"] == "kafka"
    check_anomalies(summary, out, malformed=6)
    check_counts(summary, synthetic_log)
    assert summary["malformed_by_reason"]["empty_value"] == 1
    assert (
        pd.read_parquet(out / "malformed.parquet")["source"].str.startswith(f"kafka:{topic}/").all()
    )

    # A time range is pushed down to Kafka and applied exactly on at_ms.
    status, ranged, _ = run(
        spark,
        tmp_path,
        "--bootstrap",
        kafka_bootstrap,
        "--topic",
        topic,
        *LENIENT,
        "--max-malformed",
        "6",
        "--since",
        str(T0 + 20_000),
        "--until",
        str(T0 + 95_000),
    )
    in_range = [r for r in synthetic_log.records if T0 + 20_000 <= r["at_ms"] <= T0 + 95_000]
    assert ranged["records"]["valid"] == len(in_range)
