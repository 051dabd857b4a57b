"""DataFrame logic of the delivery audit: parse and validate log records, then reconcile them.

Only built-in Spark SQL functions are used (no Python UDFs), so executors never need this code:
`spark-submit` ships nothing but the driver script, and the JVM does all the heavy work.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

EVENTS = ("scheduled", "delivered", "cancelled", "retried", "dead-lettered", "invalid")
PERCENTILES = (0.5, 0.95, 0.99, 0.999)
PERCENTILE_NAMES = ("p50", "p95", "p99", "p999")
LATENESS_METHOD = "exact (Spark `percentile`, linear interpolation between closest ranks)"
# Integer kinds Spark's VARIANT reports for JSON integers (it picks the narrowest that fits).
_INT_KINDS = ("TINYINT", "SMALLINT", "INT", "BIGINT")
_RAW_CHARS = 2000  # enough of a bad record to see what went wrong, bounded for huge values

# (name, kind, required). Nullable fields may also be absent: writers that drop nulls stay valid.
_FIELDS: tuple[tuple[str, str, bool], ...] = (
    ("event", "string", True),
    ("id", "string", True),
    ("target", "string", True),
    ("due_ms", "long", False),
    ("at_ms", "long", True),
    ("enqueued_ms", "long", False),
    ("delivery_count", "long", True),
    ("node", "string", True),
    ("group", "string", False),
    ("partition", "long", False),
    ("offset", "long", False),
    ("reason", "string", False),
)
# Internal column names: `group` and `offset` are SQL keywords, renamed once here.
_INTERNAL = {"group": "grp", "offset": "src_offset", "partition": "src_partition"}
EVENT_COLUMNS = [_INTERNAL.get(name, name) for name, _, _ in _FIELDS]


def _col_name(name: str) -> str:
    return _INTERNAL.get(name, name)


# --------------------------------------------------------------------------- parsing


def parse_json_records(raw: DataFrame) -> DataFrame:
    """`raw(value string, source string)` → event columns + `malformed_reason`, `source`, `raw`.

    JSON goes through VARIANT so that a wrong type (`"at_ms": "12"`) is told apart from a missing
    field; `from_json` would silently turn both into null (or cast strings to numbers).
    """
    v = F.expr("try_parse_json(value)")
    parsed = raw.select(
        F.col("value"), F.col("source"), v.alias("v"), F.schema_of_variant(v).alias("v_kind")
    )
    kinds = {
        name: F.schema_of_variant(F.expr(f"variant_get(v, '$.{name}')")) for name, _, _ in _FIELDS
    }
    checks: list[tuple[Column, str]] = [
        (F.col("value").isNull(), "empty_value"),
        (F.col("v").isNull(), "bad_json"),
        (~F.col("v_kind").startswith("OBJECT"), "not_an_object"),
    ]
    values: dict[str, Column] = {}
    for name, kind, required in _FIELDS:
        k = kinds[name]
        absent = k.isNull() | (k == "VOID")
        wrong = ~k.isin("STRING") if kind == "string" else ~k.isin(*_INT_KINDS)
        if required:
            checks.append((absent, f"missing_field:{name}"))
        checks.append((~absent & wrong, f"bad_type:{name}"))
        sql_type = "string" if kind == "string" else "bigint"
        values[name] = F.expr(f"try_variant_get(v, '$.{name}', '{sql_type}')")
    checks.append((~values["event"].isin(*EVENTS), "unknown_event"))
    # Lateness needs a due time: a schedule or delivery without one cannot be reconciled.
    checks.append((_needs_due(values), "missing_due_ms"))
    return parsed.select(*_shape(values, _first_failure(checks), F.col("source"), F.col("value")))


def normalize_typed(df: DataFrame, source: Column) -> DataFrame:
    """Typed tables (Parquet exports with one column per field) → the same shape as JSON input."""
    present = {c.lower(): c for c in df.columns}
    values: dict[str, Column] = {}
    checks: list[tuple[Column, str]] = []
    for name, kind, required in _FIELDS:
        sql_type = "string" if kind == "string" else "bigint"
        if name in present:
            # try_cast: a column of the wrong type yields nulls, reported below, not a crash.
            values[name] = F.col(f"`{present[name]}`").try_cast(sql_type)
        else:
            values[name] = F.lit(None).cast(sql_type)
        if required:
            checks.append((values[name].isNull(), f"missing_field:{name}"))
    checks.append((~values["event"].isin(*EVENTS), "unknown_event"))
    checks.append((_needs_due(values), "missing_due_ms"))
    raw = F.to_json(F.struct(*[F.col(f"`{c}`") for c in df.columns]))
    return df.select(*_shape(values, _first_failure(checks), source, raw))


def _shape(values: dict[str, Column], reason: Column, source: Column, raw: Column) -> list[Column]:
    """Final columns; `source` and `raw` only for malformed records (kept small in the cache)."""
    return [
        *[values[name].alias(_col_name(name)) for name, _, _ in _FIELDS],
        reason.alias("malformed_reason"),
        F.when(reason.isNotNull(), source).alias("source"),
        F.when(reason.isNotNull(), F.substring(raw, 1, _RAW_CHARS)).alias("raw"),
    ]


def _needs_due(values: dict[str, Column]) -> Column:
    return values["event"].isin("scheduled", "delivered") & values["due_ms"].isNull()


def _first_failure(checks: Iterable[tuple[Column, str]]) -> Column:
    expr: Column | None = None
    for cond, reason in checks:
        # coalesce: a null condition (e.g. comparing a null) never marks a record by itself.
        cond = F.coalesce(cond, F.lit(False))
        expr = F.when(cond, F.lit(reason)) if expr is None else expr.when(cond, F.lit(reason))
    assert expr is not None
    return expr.otherwise(F.lit(None).cast("string"))


# --------------------------------------------------------------------------- reconciliation


@dataclass(frozen=True)
class Params:
    since_ms: int | None = None
    until_ms: int | None = None
    late_threshold_ms: int = 1000
    grace_ms: int = 60_000
    list_limit: int = 100_000  # rows per anomaly table; counts stay exact beyond it


@dataclass
class Result:
    summary: dict[str, Any]
    tables: dict[str, pa.Table] = field(default_factory=dict)  # early, late, missing, ...
    histogram: list[dict[str, Any]] = field(default_factory=list)


def _empty_stats() -> dict[str, Any]:
    return {
        "events": dict.fromkeys(EVENTS, 0),
        "lateness_ms": _lateness(None),
        "early": 0,
        "late": 0,
        "missing": 0,
        "pending": 0,
        "duplicates": 0,
    }


def _lateness(row: Any) -> dict[str, Any]:
    if row is None or not row["n"]:
        return {"count": 0, "min": None, "mean": None, "max": None} | dict.fromkeys(
            PERCENTILE_NAMES
        )
    pct = dict(zip(PERCENTILE_NAMES, (float(x) for x in row["pct"]), strict=True))
    return {
        "count": int(row["n"]),
        "min": int(row["lo"]),
        "mean": float(row["mean"]),
        "max": int(row["hi"]),
    } | pct


def reconcile(
    spark: SparkSession,
    parsed: DataFrame,
    params: Params,
    progress: Callable[[str], None] = lambda _msg: None,
) -> Result:
    """Compute every figure of the audit from parsed records (see `parse_json_records`)."""
    parsed = parsed.persist(StorageLevel.MEMORY_AND_DISK)
    malformed = parsed.filter(F.col("malformed_reason").isNotNull())
    events = parsed.filter(F.col("malformed_reason").isNull()).select(*EVENT_COLUMNS)
    if params.since_ms is not None:
        events = events.filter(F.col("at_ms") >= params.since_ms)
    if params.until_ms is not None:
        events = events.filter(F.col("at_ms") <= params.until_ms)

    progress("counting events")
    window = events.agg(F.count("*").alias("n"), F.min("at_ms"), F.max("at_ms")).first()
    assert window is not None
    n_valid, first_at, last_at = int(window[0]), window[1], window[2]
    end_ms = params.until_ms if params.until_ms is not None else last_at
    reasons = {r["malformed_reason"]: int(r["count"]) for r in _count_by(malformed)}
    n_malformed = sum(reasons.values())

    overall = _empty_stats()
    by_target: dict[str, dict[str, Any]] = {}
    by_group: dict[str, dict[str, Any]] = {}

    def dims(target: str | None, grp: str | None) -> list[dict[str, Any]]:
        out = [overall]
        if target is not None:
            out.append(by_target.setdefault(target, _empty_stats()))
        if grp is not None:
            out.append(by_group.setdefault(grp, _empty_stats()))
        return out

    for row in events.groupBy("target", "grp", "event").count().collect():
        for stats in dims(row["target"], row["grp"]):
            stats["events"][row["event"]] += int(row["count"])

    progress("lateness percentiles")
    delivered = events.filter(F.col("event") == "delivered").withColumn(
        "lateness_ms", F.col("at_ms") - F.col("due_ms")
    )
    late_cond = F.col("lateness_ms") > params.late_threshold_ms
    pct = ", ".join(str(p) for p in PERCENTILES)
    view = _view(delivered)
    lateness_rows = spark.sql(
        f"""SELECT target, grp, grouping_id(target, grp) AS gid, count(*) AS n,
                   percentile(lateness_ms, array({pct})) AS pct, min(lateness_ms) AS lo,
                   avg(lateness_ms) AS mean, max(lateness_ms) AS hi,
                   count_if(lateness_ms < 0) AS early,
                   count_if(lateness_ms > {int(params.late_threshold_ms)}) AS late
            FROM {view} GROUP BY GROUPING SETS ((), (target), (grp))"""
    ).collect()
    for row in lateness_rows:
        stats = _pick(row, overall, by_target, by_group)
        if stats is not None:
            stats["lateness_ms"] = _lateness(row)
            stats["early"], stats["late"] = int(row["early"]), int(row["late"])

    progress("missing and duplicated deliveries")
    missing, pending = _missing(events, end_ms, params.grace_ms)
    # Counted here and listed below: keep them rather than join and aggregate twice.
    missing = missing.persist(StorageLevel.MEMORY_AND_DISK)
    duplicates = _duplicates(delivered).persist(StorageLevel.MEMORY_AND_DISK)
    kinds = (
        missing.select(F.lit("missing").alias("kind"), "target", "grp")
        .unionByName(pending.select(F.lit("pending").alias("kind"), "target", "grp"))
        .unionByName(duplicates.select(F.lit("duplicates").alias("kind"), "target", "grp"))
    )
    view = _view(kinds)
    for row in spark.sql(
        # `kind` is in every set, so its bit of grouping_id is 0 and gid reads as above.
        f"""SELECT kind, target, grp, grouping_id(kind, target, grp) AS gid, count(*) AS n
            FROM {view} GROUP BY GROUPING SETS ((kind), (kind, target), (kind, grp))"""
    ).collect():
        stats = _pick(row, overall, by_target, by_group)
        if stats is not None:
            stats[row["kind"]] = int(row["n"])

    progress("lateness over time")
    per_minute = [
        {
            "minute_ms": int(r["minute"]) * 60_000,
            "count": int(r["n"]),
            "p50_ms": float(r["pct"][0]),
            "p99_ms": float(r["pct"][1]),
            "max_ms": int(r["hi"]),
        }
        for r in delivered.groupBy(F.floor(F.col("at_ms") / 60_000).alias("minute"))
        .agg(
            F.count("*").alias("n"),
            F.expr("percentile(lateness_ms, array(0.5, 0.99))").alias("pct"),
            F.max("lateness_ms").alias("hi"),
        )
        .orderBy("minute")
        .collect()
    ]
    histogram = _histogram(delivered, overall["lateness_ms"])

    progress("collecting anomaly lists")
    limit = params.list_limit
    tables = {
        "early": _arrow(delivered.filter(F.col("lateness_ms") < 0), limit, "lateness_ms"),
        "late": _arrow(delivered.filter(late_cond), limit, "lateness_ms", descending=True),
        "missing": _arrow(missing, limit, "due_ms"),
        "duplicates": _arrow(duplicates, limit, "id"),
        "malformed": _arrow(
            malformed.select("source", "malformed_reason", "raw").withColumnRenamed(
                "malformed_reason", "reason"
            ),
            limit,
            None,
        ),
    }
    for cached in (missing, duplicates, parsed):
        cached.unpersist()

    summary: dict[str, Any] = {
        "window": {
            "since_ms": params.since_ms,
            "until_ms": params.until_ms,
            "first_at_ms": first_at,
            "last_at_ms": last_at,
            "end_ms": end_ms,
            "end_from": "until" if params.until_ms is not None else "log",
        },
        "params": {
            "late_threshold_ms": params.late_threshold_ms,
            "grace_ms": params.grace_ms,
            "list_limit": params.list_limit,
        },
        "lateness_method": LATENESS_METHOD,
        "records": {"total": n_valid + n_malformed, "valid": n_valid, "malformed": n_malformed},
        "malformed_by_reason": dict(sorted(reasons.items())),
        "anomalies": {
            "early": overall["early"],
            "late": overall["late"],
            "missing": overall["missing"],
            "duplicates": overall["duplicates"],
            "malformed": n_malformed,
        },
        "overall": overall,
        "by_target": dict(sorted(by_target.items())),
        "by_group": dict(sorted(by_group.items())),
        "lateness_per_minute": per_minute,
        "listed": {name: t.num_rows for name, t in tables.items()},
    }
    return Result(summary=summary, tables=tables, histogram=histogram)


def _count_by(malformed: DataFrame) -> list[Any]:
    return malformed.groupBy("malformed_reason").count().collect()


def _view(df: DataFrame) -> str:
    # A fresh name per call: several audits may share one session (tests, notebooks).
    name = f"kpd_audit_{uuid.uuid4().hex}"
    df.createOrReplaceTempView(name)
    return name


def _pick(
    row: Any,
    overall: dict[str, Any],
    by_target: dict[str, dict[str, Any]],
    by_group: dict[str, dict[str, Any]],
) -> dict[str, Any] | None:
    """Route a GROUPING SETS row: gid 3 = overall, 1 = per target, 2 = per group."""
    gid = int(row["gid"])
    if gid == 3:
        return overall
    if gid == 1 and row["target"] is not None:
        return by_target.setdefault(row["target"], _empty_stats())
    if gid == 2 and row["grp"] is not None:
        return by_group.setdefault(row["grp"], _empty_stats())
    return None  # events without a group: no per-group row


def _missing(events: DataFrame, end_ms: int | None, grace_ms: int) -> tuple[DataFrame, DataFrame]:
    """Scheduled ids with neither a delivery nor a cancel: missing once due + grace ≤ end."""
    # A re-scheduled id counts once, with its latest schedule.
    scheduled = (
        events.filter(F.col("event") == "scheduled")
        .groupBy("id")
        .agg(
            F.max_by("target", "at_ms").alias("target"),
            F.max_by("grp", "at_ms").alias("grp"),
            F.max_by("due_ms", "at_ms").alias("due_ms"),
            F.max("at_ms").alias("scheduled_at_ms"),
            F.max_by("node", "at_ms").alias("node"),
        )
    )
    resolved = events.filter(F.col("event").isin("delivered", "cancelled")).select("id")
    open_ = scheduled.join(resolved, "id", "left_anti")
    deadline = F.col("due_ms") + F.lit(grace_ms)
    end = F.lit(end_ms if end_ms is not None else 0).cast("bigint")
    missing = open_.filter(deadline <= end).withColumn("overdue_ms", end - F.col("due_ms"))
    return missing, open_.filter(deadline > end)


def _duplicates(delivered: DataFrame) -> DataFrame:
    return (
        delivered.groupBy("id")
        .agg(
            F.count("*").alias("deliveries"),
            F.min("target").alias("target"),
            F.min("grp").alias("grp"),
            F.min("due_ms").alias("due_ms"),
            F.min("at_ms").alias("first_at_ms"),
            F.max("at_ms").alias("last_at_ms"),
            F.array_join(F.array_sort(F.collect_set("node")), ",").alias("nodes"),
        )
        .filter(F.col("deliveries") > 1)
    )


def _histogram(delivered: DataFrame, lateness: dict[str, Any], bins: int = 60) -> list[dict]:
    """Bucket counts computed in Spark; values past p99.9 share the last bucket (long tail)."""
    if not lateness["count"]:
        return []
    lo = min(0, int(lateness["min"]))
    hi = max(lo + bins, int(lateness["p999"]) + 1)
    width = max(1, -(-(hi - lo) // bins))
    bucket = F.least(F.floor((F.col("lateness_ms") - lo) / width), F.lit(bins - 1))
    rows = delivered.groupBy(bucket.alias("b")).count().orderBy("b").collect()
    return [
        {
            "from_ms": lo + int(r["b"]) * width,
            "to_ms": lo + (int(r["b"]) + 1) * width,
            "count": int(r["count"]),
        }
        for r in rows
    ]


def _arrow(df: DataFrame, limit: int, order: str | None, descending: bool = False) -> pa.Table:
    """Anomaly list → Arrow (written by the driver as one file, also under spark-submit)."""
    out = df.drop("malformed_reason") if "malformed_reason" in df.columns else df
    out = out.withColumnsRenamed({v: k for k, v in _INTERNAL.items() if v in out.columns})
    if order is not None:
        out = out.orderBy(F.col(order).desc() if descending else F.col(order), "id")
    return out.limit(limit).toArrow()
