"""Reconcile the delivery log: every figure of the audit from parsed records (`spark.parse`).

The work on the log, in order (Spark jobs over the data; the rest runs on small results):

1. the in-window records are cached, so a costly source (Kafka, JSON) is read and parsed once;
   typed Parquet is read again by each pass instead, only the columns that pass needs;
2. one aggregation of the log into a frequency table (`spark.lateness`): counts by target,
   group and event, malformed reasons, the time window, both lateness measures;
3. one aggregation of the delay events per schedule id: missing, pending and duplicated ids
   (`spark.schedule_outcomes`);
4. only for anomaly kinds whose count is not zero: one scan of the log for the early, late and
   malformed rows, and one for the details of duplicated ids (`spark.anomaly_lists`).

Missing, pending and duplicates concern delay schedules (events without a `group`). Pop
deliveries are at least once by contract (a message comes back when its lease ends), so a pop
message delivered several times is not a duplicate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark.anomaly_lists import ANOMALY_KINDS, anomaly_lists
from spark.lateness import (
    LATENESS_METHOD,
    MEASURES,
    Frequencies,
    lateness_columns,
    measure_stats,
)
from spark.parse import EVENTS
from spark.schedule_outcomes import per_schedule


@dataclass(frozen=True)
class Params:
    since_ms: int | None = None
    until_ms: int | None = None
    late_threshold_ms: int = 1000  # on dispatch lateness
    grace_ms: int = 60_000
    list_limit: int = 100_000  # rows per anomaly table; counts stay exact beyond it


@dataclass
class Result:
    summary: dict[str, Any]
    tables: dict[str, pa.Table] = field(default_factory=dict)  # early, late, missing, ...
    histograms: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # per measure


def _empty_stats() -> dict[str, Any]:
    return {
        "events": dict.fromkeys(EVENTS, 0),
        **{measure: measure_stats(None, measure) for measure in MEASURES},
        "early": 0,
        "late": 0,
        "late_end_to_end": 0,
        "missing": 0,
        "pending": 0,
        "duplicates": 0,
    }


class _Dims:
    """Stats overall, per target topic and per pop group."""

    def __init__(self) -> None:
        self.overall = _empty_stats()
        self.by_target: dict[str, dict[str, Any]] = {}
        self.by_group: dict[str, dict[str, Any]] = {}

    def of(self, target: str | None, grp: str | None) -> list[dict[str, Any]]:
        out = [self.overall]
        if target is not None:
            out.append(self.by_target.setdefault(target, _empty_stats()))
        if grp is not None:
            out.append(self.by_group.setdefault(grp, _empty_stats()))
        return out

    def pick(self, row: Any) -> dict[str, Any] | None:
        """Route a grouping-sets row: gid 3 = overall, 1 = per target, 2 = per group."""
        gid = int(row["gid"])
        if gid == 3:
            return self.overall
        if gid == 1 and row["target"] is not None:
            return self.by_target.setdefault(row["target"], _empty_stats())
        if gid == 2 and row["grp"] is not None:
            return self.by_group.setdefault(row["grp"], _empty_stats())
        return None  # deliveries without a group: no per-group row


def reconcile(
    parsed: DataFrame,
    params: Params,
    progress: Callable[[str], None] = lambda _msg: None,
    cache: bool = True,
) -> Result:
    """Compute every figure of the audit from parsed records (cached first if `cache`)."""
    events = _in_window(parsed, params)
    if cache:
        events = events.persist(StorageLevel.MEMORY_AND_DISK)
    freq = schedules = None
    try:
        progress("reading and aggregating the log")
        freq = Frequencies.of(events, params.late_threshold_ms)
        dims = _Dims()
        reasons: dict[str, int] = {}
        first_at = last_at = None
        for row in freq.counts():
            if row["malformed_reason"] is not None:
                reasons[row["malformed_reason"]] = int(row["n"])
                continue
            for stats in dims.of(row["target"], row["grp"]):
                stats["events"][row["event"]] += int(row["n"])
            first_at = _extreme(min, first_at, row["first_at_ms"])
            last_at = _extreme(max, last_at, row["last_at_ms"])
        end_ms = params.until_ms if params.until_ms is not None else last_at

        progress("lateness percentiles")
        for row in freq.stats():
            stats = dims.pick(row)
            if stats is not None:
                for measure in MEASURES:
                    stats[measure] = measure_stats(row, measure)
                for kind in ("early", "late", "late_end_to_end"):
                    stats[kind] = int(row[kind])
        per_minute = freq.per_minute()
        histograms = {m: freq.histogram(m, dims.overall[m]) for m in MEASURES}

        progress("missing and duplicated deliveries")
        schedules = per_schedule(events, end_ms, params.grace_ms).persist(
            StorageLevel.MEMORY_AND_DISK
        )
        for row in schedules.groupBy("kind", "target").count().collect():
            for stats in dims.of(row["target"], None):
                stats[row["kind"]] += int(row["count"])

        progress("collecting anomaly lists")
        counts = {kind: dims.overall[kind] for kind in ANOMALY_KINDS[:-1]}
        counts["malformed"] = sum(reasons.values())
        tables = anomaly_lists(
            events, schedules, counts, params.late_threshold_ms, params.list_limit
        )
    finally:
        for frame in (schedules, events):
            if frame is not None:
                frame.unpersist()
        if freq is not None:
            freq.unpersist()

    n_valid = sum(dims.overall["events"].values())
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
        "records": {
            "total": n_valid + counts["malformed"],
            "valid": n_valid,
            "malformed": counts["malformed"],
        },
        "malformed_by_reason": dict(sorted(reasons.items())),
        "anomalies": counts,
        "overall": dims.overall,
        "by_target": dict(sorted(dims.by_target.items())),
        "by_group": dict(sorted(dims.by_group.items())),
        "lateness_per_minute": per_minute,
        "listed": {name: t.num_rows for name, t in tables.items()},
    }
    return Result(summary=summary, tables=tables, histograms=histograms)


def _extreme(pick: Callable[[int, int], int], current: int | None, value: int | None) -> Any:
    if value is None:
        return current
    return value if current is None else pick(current, value)


def _in_window(parsed: DataFrame, params: Params) -> DataFrame:
    """Valid records with at_ms in [since, until], and every malformed record."""
    keep = F.col("malformed_reason").isNotNull()
    in_window = F.lit(True)
    if params.since_ms is not None:
        in_window &= F.col("at_ms") >= params.since_ms
    if params.until_ms is not None:
        in_window &= F.col("at_ms") <= params.until_ms
    return lateness_columns(parsed.filter(keep | in_window))
