"""kpd delivery audit: reconcile the delivery log (`kpd.delivery-log`) and report anomalies.

Run it
------
Locally (`kpd audit ARGS` calls `main(ARGS)`; the same works as `python spark/audit.py ARGS`)::

    kpd audit --since 2026-01-01T00:00:00Z --until 1767312000000 --out audit-out
    kpd audit --bootstrap broker:9092 --topic kpd.delivery-log --out audit-out
    kpd audit --input exported-log.jsonl --out audit-out        # or a Parquet file / folder

Kafka bootstrap and topic come from the settings of `kpd run` (kpd.toml or the file named by
KPD_CONFIG, overlaid by KPD_BOOTSTRAP / KPD_DELIVERY_LOG_TOPIC; defaults 127.0.0.1:9092 and
kpd.delivery-log); `--bootstrap` / `--topic` win over them. Before Spark starts, the audit checks
that Kafka answers and the topic exists (an absent topic would read as an empty, passing log).

A local run builds its own SparkSession (`--master`, default `local[*]`) and adds Spark's Kafka
connector with `spark.jars` (`spark.session`). On a cluster the session comes from spark-submit,
so ship the connector with `--packages`::

    spark-submit --master spark://host:7077 \
        --packages org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version> \
        spark/audit.py --bootstrap broker:9092 --out /shared/audit-out

In client mode (the default) nothing else is needed: executors run only built-in Spark SQL. In
cluster deploy mode add `--py-files kpd.zip` (a zip of the `spark` and `foundation` packages) so
the driver finds them. Outputs are written by the driver to `--out`.

Range: `--since` / `--until` (epoch ms or ISO-8601; naive times are UTC) keep events whose `at_ms`
lies within [since, until]. From Kafka they are also pushed down as `startingTimestamp` /
`endingTimestamp` (widened by one minute, since the record timestamp and `at_ms` may differ a
little); `--starting-offsets` / `--ending-offsets` take Spark's JSON offset ranges instead, e.g.
`'{"kpd.delivery-log":{"0":1200,"1":-2}}'`. Without a range the whole log is audited. Reads use
`read_committed`, so aborted transactional writes are not counted.

Exit status: 0 when every anomaly count is within its threshold, 2 when one exceeds it, 1 for usage
errors and failures (bad arguments or settings, unreadable input, unreachable Kafka).

Outputs in `--out`
------------------
`summary.json` (stable names; times in epoch ms, durations in ms)::

    schema_version        2 (2 added dispatch_lateness_ms and late_end_to_end; `late` now
                          counts dispatch lateness)
    generated_at_ms       when the audit ran
    spark_version         Spark of the session
    source                {kind: "kafka"|"files", description, bootstrap, topic, input}
    window                {since_ms, until_ms, first_at_ms, last_at_ms, end_ms, end_from}
                          end_ms = until, else the newest at_ms ("until"|"log" in end_from);
                          missing deliveries are judged as of end_ms
    params                {late_threshold_ms, grace_ms, list_limit}
    lateness_method       how percentiles are computed (exact, linear interpolation)
    records               {total, valid, malformed}  (valid = inside the window and well-formed)
    malformed_by_reason   {reason: count}; reasons: empty_value, bad_json, not_an_object,
                          missing_field:<f>, bad_type:<f>, unknown_event, missing_due_ms
    anomalies             {early, late, missing, duplicates, malformed}  (overall counts)
    overall, by_target{topic}, by_group{group}: Stats
      Stats = {events: {scheduled, delivered, cancelled, retried, dead-lettered, invalid},
               lateness_ms, dispatch_lateness_ms: {count, min, mean, p50, p95, p99, p999, max}
                 (null when count=0),
               early, late, late_end_to_end, missing, pending, duplicates}
      (pending = scheduled, unresolved, but not yet due + grace at end_ms;
       by_group holds events carrying a `group`, i.e. pop events; retries and dead letters per
       group are its events.retried / events.dead-lettered)
    lateness_per_minute   [{minute_ms, count, p50_ms, p99_ms, max_ms, dispatch_p50_ms,
                            dispatch_p99_ms, dispatch_max_ms}]  (by delivery minute)
    listed                {early, late, missing, duplicates, malformed}: rows in each Parquet
    verdict               {thresholds: {early, late, missing, duplicates, malformed} (-1 = none),
                           violations: [kind], exit_status}

Definitions (for delay deliveries: `delivered` events with a due time):
lateness = at_ms - due_ms (end to end); dispatch lateness = at_ms - max(due_ms, enqueued_ms), kpd's
own (equal to lateness when enqueued_ms is null); early = lateness < 0; late = dispatch lateness >
`--late-threshold-ms`, late_end_to_end = lateness > it (reported, not gated); missing = scheduled
id (latest schedule) with no `delivered`, `cancelled` nor `invalid` event and due_ms +
`--grace-ms` ≤ end_ms; duplicate = id with more than one `delivered` event. Pop deliveries
(`delivered` with a `group`) have no due time: they are counted, without lateness, and not checked
for duplicates (pop is at least once).

Parquet anomaly tables (one file each, at most `--list-limit` rows; counts in summary are exact):
`early.parquet`, `late.parquet` (delivered events + lateness_ms + dispatch_lateness_ms),
`missing.parquet` (id, target, group, due_ms, scheduled_at_ms, node, overdue_ms),
`duplicates.parquet` (id, deliveries, target, group, due_ms, first_at_ms, last_at_ms, nodes),
`malformed.parquet` (source, reason, raw). `report.html` shows it all for people, with
`lateness_histogram.png` and `lateness_over_time.png` (both measures in each).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # Run as a script (`spark-submit spark/audit.py`, `python spark/audit.py`): put the project
    # root first so `spark.reconcile` imports the same way as under `kpd audit`.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow.parquet as pq
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from foundation.config import SettingsError, load_settings
from spark import reconcile, report
from spark.options import THRESHOLDS, UsageError, build_parser
from spark.session import local_session
from spark.sources import read_files, read_kafka

SCHEMA_VERSION = 2
KAFKA_CHECK_TIMEOUT_S = 10.0


class _Progress:
    """One line per stage on stderr, with the elapsed time, so long runs show they move."""

    def __init__(self) -> None:
        self.start = time.monotonic()

    def __call__(self, message: str) -> None:
        print(f"[kpd audit +{time.monotonic() - self.start:6.1f}s] {message}", file=sys.stderr)


def _settings_for_kafka(args: argparse.Namespace) -> None:
    """Fill `args.bootstrap` and `args.topic` from the settings where the flags leave them out.

    The settings are those of `kpd run` (kpd.toml or KPD_CONFIG, then KPD_* variables).
    """
    if args.bootstrap is not None and args.topic is not None:
        return
    try:
        settings = load_settings()
    except SettingsError as exc:
        raise UsageError(f"bad settings: {exc}") from None
    args.bootstrap = args.bootstrap or settings.bootstrap
    args.topic = args.topic or settings.delivery_log_topic


def _check_kafka(args: argparse.Namespace) -> None:
    """Fail in seconds, before Spark starts, when Kafka is unreachable or the topic is absent.

    Spark's own client retries for minutes, and an absent topic would read as an empty log that
    passes every threshold. Options librdkafka does not know (Java-only ones such as
    sasl.jaas.config) skip the check: Spark still reports what goes wrong, only later.
    """
    options = {k.removeprefix("kafka."): v for k, v in args.kafka_option}
    try:
        admin = AdminClient({**options, "bootstrap.servers": args.bootstrap})
    except (KafkaException, ValueError, TypeError):
        return
    try:
        topics = admin.list_topics(timeout=KAFKA_CHECK_TIMEOUT_S).topics
    except KafkaException as exc:
        raise UsageError(
            f"cannot reach Kafka at {args.bootstrap} within {KAFKA_CHECK_TIMEOUT_S:.0f} s: {exc}"
        ) from None
    if args.topic not in topics:
        raise UsageError(f"topic {args.topic!r} does not exist on Kafka at {args.bootstrap}")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.input is not None and not Path(args.input).exists() and "://" not in args.input:
            raise UsageError(f"--input {args.input}: no such file or folder")
        if args.since is not None and args.until is not None and args.since > args.until:
            raise UsageError("--since is after --until")
        if args.input is None:
            _settings_for_kafka(args)
            _check_kafka(args)
    except UsageError as exc:
        print(f"kpd audit: error: {exc}\n{parser.format_usage()}", file=sys.stderr, end="")
        return 1
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    try:
        return _run(args)
    except Exception as exc:  # a failure is not "anomalies found": keep status 2 unambiguous
        print(f"kpd audit: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    progress = _Progress()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # Reuse a session that already exists: spark-submit made it (master and jars are the
    # submitter's business), or the caller did (tests, notebooks). Otherwise build our own.
    spark = SparkSession.getActiveSession()
    owned = spark is None
    if spark is None and "PYSPARK_GATEWAY_PORT" in os.environ:
        # Launched by spark-submit: its JVM already holds --master, --packages and friends.
        progress("joining the spark-submit session")
        spark = SparkSession.builder.appName("kpd-audit").getOrCreate()
    elif spark is None:
        progress(f"starting Spark ({args.master})")
        spark = local_session(
            args.master, kafka=args.input is None, driver_memory=args.driver_memory
        )
    try:
        if args.input is not None:
            progress(f"reading {args.input}")
            log = read_files(spark, args.input)
            source = {"kind": "files", "description": f"files {args.input}", "input": args.input}
        else:
            progress(f"reading Kafka topic {args.topic} from {args.bootstrap}")
            log = read_kafka(spark, args)
            source = {
                "kind": "kafka",
                "description": f"Kafka {args.bootstrap} topic {args.topic}",
                "bootstrap": args.bootstrap,
                "topic": args.topic,
            }
        params = reconcile.Params(
            since_ms=args.since,
            until_ms=args.until,
            late_threshold_ms=args.late_threshold_ms,
            grace_ms=args.grace_ms,
            list_limit=args.list_limit,
        )
        result = reconcile.reconcile(log.records, params, progress, cache=log.cache)
        summary = _finish(result, args, source, spark.version)
        progress("writing report")
        for name, table in result.tables.items():
            pq.write_table(table, out / f"{name}.parquet")
        plots = report.write_plots(out, summary, result.histograms)
        report.write_html(out, summary, result.tables, plots)
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    finally:
        if owned:
            spark.stop()
    verdict = summary["verdict"]
    progress(
        f"done: {summary['records']['total']:,} records, anomalies "
        + ", ".join(f"{k}={v}" for k, v in summary["anomalies"].items())
        + (f"; FAIL ({', '.join(verdict['violations'])})" if verdict["violations"] else "; PASS")
        + f" → {out / 'report.html'}"
    )
    return int(verdict["exit_status"])


def _finish(
    result: reconcile.Result, args: argparse.Namespace, source: dict[str, Any], version: str
) -> dict[str, Any]:
    """Add provenance and the pass/fail verdict; key order is the documented one."""
    thresholds = {kind: getattr(args, dest) for kind, (dest, _) in THRESHOLDS.items()}
    anomalies = result.summary["anomalies"]
    violations = [k for k, limit in thresholds.items() if 0 <= limit < anomalies[k]]
    return {
        "schema_version": SCHEMA_VERSION,
        "generated_at_ms": int(time.time() * 1000),
        "spark_version": version,
        "source": source,
        **result.summary,
        "verdict": {
            "thresholds": thresholds,
            "violations": violations,
            "exit_status": 2 if violations else 0,
        },
    }


if __name__ == "__main__":
    sys.exit(main())
