"""kpd delivery audit: reconcile the delivery log (`kpd.delivery-log`) and report anomalies.

Run it
------
Locally (`kpd audit ARGS` calls `main(ARGS)`; the same works as `python spark/audit.py ARGS`)::

    kpd audit --bootstrap 127.0.0.1:9092 --since 2026-01-01T00:00:00Z --until 1767312000000 \
        --out audit-out
    kpd audit --input exported-log.jsonl --out audit-out        # or a Parquet file / folder

A local run builds its own SparkSession (`--master`, default `local[*]`) and adds Spark's Kafka
connector with `spark.jars`; the connector jars are fetched once from Maven Central into the kpd
cache (`$KPD_CACHE_DIR`, else `~/.cache/kpd`) and reused afterwards. File input needs no jars.

On a cluster the session comes from spark-submit, so ship the connector with `--packages`::

    spark-submit --master spark://host:7077 \
        --packages org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version> \
        spark/audit.py --bootstrap broker:9092 --out /shared/audit-out

In client mode (the default) nothing else is needed: executors run only built-in Spark SQL. In
cluster deploy mode add `--py-files spark.zip` (a zip of this package) so the driver finds
`spark.reconcile` and `spark.report`. Outputs are written by the driver to `--out`.

Range: `--since` / `--until` (epoch ms or ISO-8601; naive times are UTC) keep events whose `at_ms`
lies within [since, until]. From Kafka they are also pushed down as `startingTimestamp` /
`endingTimestamp` (widened by one minute, since the record timestamp and `at_ms` may differ a
little); `--starting-offsets` / `--ending-offsets` take Spark's JSON offset ranges instead, e.g.
`'{"kpd.delivery-log":{"0":1200,"1":-2}}'`. Without a range the whole log is audited. Reads use
`read_committed`, so aborted transactional writes are not counted.

Exit status: 0 when every anomaly count is within its threshold, 2 when one exceeds it, 1 for usage
errors and failures (bad arguments, unreadable input, unreachable Kafka).

Outputs in `--out`
------------------
`summary.json` (stable names; times in epoch ms, durations in ms)::

    schema_version        1
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
               lateness_ms: {count, min, mean, p50, p95, p99, p999, max} (null when count=0),
               early, late, missing, pending, duplicates}
      (pending = scheduled, unresolved, but not yet due + grace at end_ms;
       by_group holds events carrying a `group`, i.e. pop events; retries and dead letters per
       group are its events.retried / events.dead-lettered)
    lateness_per_minute   [{minute_ms, count, p50_ms, p99_ms, max_ms}]  (by delivery minute)
    listed                {early, late, missing, duplicates, malformed}: rows in each Parquet
    verdict               {thresholds: {early, late, missing, duplicates, malformed} (-1 = none),
                           violations: [kind], exit_status}

Definitions: lateness = delivered.at_ms - due_ms; early = lateness < 0; late = lateness >
`--late-threshold-ms`; missing = scheduled id (latest schedule) with no `delivered` nor
`cancelled` event and due_ms + `--grace-ms` ≤ end_ms; duplicate = id with more than one
`delivered` event.

Parquet anomaly tables (one file each, at most `--list-limit` rows; counts in summary are exact):
`early.parquet`, `late.parquet` (delivered events + lateness_ms), `missing.parquet` (id, target,
group, due_ms, scheduled_at_ms, node, overdue_ms), `duplicates.parquet` (id, deliveries, target,
group, due_ms, first_at_ms, last_at_ms, nodes), `malformed.parquet` (source, reason, raw).
`report.html` shows it all for people, with `lateness_histogram.png` and `lateness_over_time.png`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

if __package__ in (None, ""):
    # Run as a script (`spark-submit spark/audit.py`, `python spark/audit.py`): put the project
    # root first so `spark.reconcile` imports the same way as under `kpd audit`.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark import reconcile, report

DEFAULT_TOPIC = "kpd.delivery-log"
KAFKA_CONNECTOR = "spark-sql-kafka-0-10_2.13"
TOKEN_PROVIDER = "spark-token-provider-kafka-0-10_2.13"
# Used only when Maven Central lacks the connector of the exact Spark version (seen with pyspark
# 4.3.0: neither it nor the 4.1+/4.2 token providers are published). Override by environment.
FALLBACK_CONNECTOR = os.environ.get("KPD_SPARK_KAFKA_VERSION", "4.2.0")
FALLBACK_TOKEN_PROVIDER = os.environ.get("KPD_SPARK_TOKEN_PROVIDER_VERSION", "4.0.0")
TIMESTAMP_SLACK_MS = 60_000
THRESHOLDS = {  # kind → (option, default); -1 means "no limit"
    "early": ("max_early", 0),
    "missing": ("max_missing", 0),
    "duplicates": ("max_duplicates", 0),
    "late": ("max_late", -1),
    "malformed": ("max_malformed", 0),
}


class UsageError(Exception):
    """Bad command line: exit status 1 (argparse's own would be 2, our "anomalies" status)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


class _Progress:
    """One line per stage on stderr, with the elapsed time, so long runs show they move."""

    def __init__(self) -> None:
        self.start = time.monotonic()

    def __call__(self, message: str) -> None:
        print(f"[kpd audit +{time.monotonic() - self.start:6.1f}s] {message}", file=sys.stderr)


def parse_time(text: str) -> int:
    """Epoch milliseconds or ISO-8601 (naive = UTC) → epoch ms."""
    text = text.strip()
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not epoch ms nor ISO-8601: {text!r}") from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="kpd audit", description="Audit the kpd delivery log with Spark.")
    src = p.add_argument_group("source (Kafka unless --input)")
    src.add_argument("--bootstrap", help="Kafka bootstrap servers (default $KPD_BOOTSTRAP)")
    src.add_argument("--topic", default=DEFAULT_TOPIC, help="delivery log topic")
    src.add_argument("--input", help="exported log instead of Kafka: JSON lines or Parquet")
    src.add_argument("--since", type=parse_time, help="first at_ms (epoch ms or ISO-8601)")
    src.add_argument("--until", type=parse_time, help="last at_ms; also the audit's end time")
    src.add_argument("--starting-offsets", help="Spark JSON offsets (overrides --since pushdown)")
    src.add_argument("--ending-offsets", help="Spark JSON offsets (overrides --until pushdown)")
    src.add_argument(
        "--kafka-option",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Kafka client setting, e.g. security.protocol=SASL_SSL (repeatable)",
    )
    p.add_argument("--out", required=True, help="output folder (created)")
    p.add_argument("--master", default="local[*]", help="Spark master for a local session")
    p.add_argument("--driver-memory", default="2g", help="driver memory of a local session")
    p.add_argument("--late-threshold-ms", type=int, default=1000)
    p.add_argument("--grace-ms", type=int, default=60_000)
    p.add_argument("--list-limit", type=int, default=100_000, help="rows per anomaly table")
    for kind, (dest, default) in THRESHOLDS.items():
        p.add_argument(
            f"--{dest.replace('_', '-')}",
            dest=dest,
            type=int,
            default=default,
            help=f"most {kind} anomalies allowed before exit status 2 (-1: no limit; {default})",
        )
    return p


# --------------------------------------------------------------------------- session


def connector_jars(spark_version: str) -> list[str]:
    """Jars of Spark's Kafka connector, from the kpd cache (Maven Central on the first run).

    Jars Spark already ships (scala-library, slf4j, ...) are left out: the same classes twice on
    the class path, in different versions, is how odd linkage errors start.
    """
    from sidecar.maven import COMPLETE_MARKER, Artifact, MavenError, cache_root, fetch_jars

    g = "org.apache.spark"
    exact = (f"spark-kafka-{spark_version}", [Artifact(g, KAFKA_CONNECTOR, spark_version)])
    compat = (
        f"spark-kafka-{spark_version}-compat-{FALLBACK_CONNECTOR}-{FALLBACK_TOKEN_PROVIDER}",
        [
            Artifact(g, KAFKA_CONNECTOR, FALLBACK_CONNECTOR, exclusions=((g, TOKEN_PROVIDER),)),
            # Spark ships its own Hadoop client; the token provider would add a second one.
            Artifact(
                g,
                TOKEN_PROVIDER,
                FALLBACK_TOKEN_PROVIDER,
                exclusions=(("org.apache.hadoop", "hadoop-client-runtime"),),
            ),
        ],
    )
    cached = [cache_root() / n for n, _ in (exact, compat)]
    folder = next((f for f in cached if (f / COMPLETE_MARKER).exists()), None)
    if folder is None:
        try:
            folder = fetch_jars(*exact)
        except MavenError:
            print(
                f"[kpd audit] {KAFKA_CONNECTOR}:{spark_version} is not on Maven Central; using "
                f"{FALLBACK_CONNECTOR} with token provider {FALLBACK_TOKEN_PROVIDER}",
                file=sys.stderr,
            )
            folder = fetch_jars(*compat)
    return [str(j) for j in sorted(folder.glob("*.jar")) if _base(j.name) not in _spark_jars()]


def _base(jar: str) -> str:
    """`kafka-clients-3.9.2.jar` → `kafka-clients`."""
    return re.sub(r"-\d[^-]*(-[A-Za-z0-9.]+)*\.jar$", "", jar)


def _spark_jars() -> set[str]:
    import pyspark

    home = os.environ.get("SPARK_HOME") or str(Path(pyspark.__file__).parent)
    return {_base(j.name) for j in (Path(home) / "jars").glob("*.jar")}


def local_session(
    master: str, kafka: bool, driver_memory: str = "2g", conf: dict[str, str] | None = None
) -> SparkSession:
    """A session of our own; with `kafka`, the connector jars come from the cache."""
    import pyspark

    builder = (
        SparkSession.builder.appName("kpd-audit")
        .master(master)
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")  # our progress lines instead
        # One machine: 200 shuffle partitions (the default) mostly add scheduling overhead.
        .config("spark.sql.shuffle.partitions", "16")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    if kafka:
        builder = builder.config("spark.jars", ",".join(connector_jars(pyspark.__version__)))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


# --------------------------------------------------------------------------- input


def read_kafka(spark: SparkSession, args: argparse.Namespace, bootstrap: str) -> DataFrame:
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", args.topic)
        .option("kafka.isolation.level", "read_committed")
        # Retention may have dropped old segments: audit what is left rather than fail.
        .option("failOnDataLoss", "false")
    )
    if args.starting_offsets:
        reader = reader.option("startingOffsets", args.starting_offsets)
    elif args.since is not None:
        reader = reader.option("startingTimestamp", str(args.since - TIMESTAMP_SLACK_MS))
        # A partition with nothing that recent starts at its end instead of failing the job.
        reader = reader.option("startingOffsetsByTimestampStrategy", "latest")
    if args.ending_offsets:
        reader = reader.option("endingOffsets", args.ending_offsets)
    elif args.until is not None:
        reader = reader.option("endingTimestamp", str(args.until + TIMESTAMP_SLACK_MS))
    for key, value in args.kafka_option:
        reader = reader.option(key if key.startswith("kafka.") else f"kafka.{key}", value)
    raw = reader.load()
    return reconcile.parse_json_records(
        raw.select(
            F.col("value").cast("string").alias("value"),
            F.format_string("kafka:%s/%d@%d", "topic", "partition", "offset").alias("source"),
        )
    )


def read_files(spark: SparkSession, path: str) -> DataFrame:
    """JSON lines (one record per line) or Parquet: typed columns, or a Kafka-style `value`."""
    if _is_parquet(path):
        df = spark.read.parquet(path)
        source = F.col("_metadata.file_path")
        if "value" in df.columns and "event" not in df.columns:
            return reconcile.parse_json_records(
                df.select(F.col("value").cast("string").alias("value"), source.alias("source"))
            )
        return reconcile.normalize_typed(df, source)
    # Blank lines (a trailing newline, hand-edited files) are not records, so not malformed.
    raw = spark.read.text(path).filter(F.trim(F.col("value")) != "")
    return reconcile.parse_json_records(
        raw.select("value", F.col("_metadata.file_path").alias("source"))
    )


def _is_parquet(path: str) -> bool:
    p = Path(path)
    if p.is_dir():
        return any(p.rglob("*.parquet"))
    return p.suffix == ".parquet"


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        bootstrap = args.bootstrap or os.environ.get("KPD_BOOTSTRAP")
        if args.input is None and not bootstrap:
            raise UsageError("give --bootstrap (or KPD_BOOTSTRAP) or --input")
        if args.input is not None and not Path(args.input).exists() and "://" not in args.input:
            raise UsageError(f"--input {args.input}: no such file or folder")
        if args.since is not None and args.until is not None and args.since > args.until:
            raise UsageError("--since is after --until")
    except UsageError as exc:
        print(f"kpd audit: error: {exc}\n{parser.format_usage()}", file=sys.stderr, end="")
        return 1
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    try:
        return _run(args, bootstrap)
    except Exception as exc:  # a failure is not "anomalies found": keep status 2 unambiguous
        print(f"kpd audit: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace, bootstrap: str | None) -> int:
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
            parsed = read_files(spark, args.input)
            source = {"kind": "files", "description": f"files {args.input}", "input": args.input}
        else:
            progress(f"reading Kafka topic {args.topic} from {bootstrap}")
            parsed = read_kafka(spark, args, bootstrap or "")
            source = {
                "kind": "kafka",
                "description": f"Kafka {bootstrap} topic {args.topic}",
                "bootstrap": bootstrap,
                "topic": args.topic,
            }
        params = reconcile.Params(
            since_ms=args.since,
            until_ms=args.until,
            late_threshold_ms=args.late_threshold_ms,
            grace_ms=args.grace_ms,
            list_limit=args.list_limit,
        )
        result = reconcile.reconcile(spark, parsed, params, progress)
        summary = _finish(result, args, source, spark.version)
        progress("writing report")
        for name, table in result.tables.items():
            pq.write_table(table, out / f"{name}.parquet")
        plots = report.write_plots(out, summary, result.histogram)
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
        "schema_version": 1,
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
