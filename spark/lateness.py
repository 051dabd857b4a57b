"""Counts and lateness figures of the audit, all from one frequency table of the log.

Two measures of each delay delivery (`delivered` with a due time):

- `lateness_ms` = at_ms - due_ms, end to end: what the target's readers saw. A schedule that
  reached kpd after its due time (produced late, or with a due time already past) counts as late
  by however long it was overdue on arrival.
- `dispatch_lateness_ms` = at_ms - max(due_ms, enqueued_ms): kpd's own lateness, counted from
  the moment it could first deliver (the due time, or the buffer record's timestamp when that is
  later). With `enqueued_ms` null or absent it equals `lateness_ms`.

Pop deliveries (`delivered` with a `group`) have no due time, hence no lateness.

The cached log is aggregated once, into record counts per (target, group, event, malformed
reason, lateness, dispatch lateness) and per (minute, lateness, dispatch lateness). That table
grows with the number of distinct lateness values, not with the log, and every figure is computed
from it: percentiles with Spark's exact `percentile` weighted by the counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

PERCENTILES = (0.5, 0.95, 0.99, 0.999)
PERCENTILE_NAMES = ("p50", "p95", "p99", "p999")
LATENESS_METHOD = "exact (Spark `percentile`, linear interpolation between closest ranks)"
MEASURES = ("lateness_ms", "dispatch_lateness_ms")
_COLUMN = {"lateness_ms": "lat", "dispatch_lateness_ms": "disp"}
_KEYS = ["target", "grp", "event", "malformed_reason", "minute", "lat", "disp"]
_BY_KIND = ["target", "grp", "event", "malformed_reason", "lat", "disp"]
_BY_MINUTE = ["minute", "lat", "disp"]
_BY_KIND_ID = 0b0000100  # grouping_id of _BY_KIND over _KEYS: only `minute` aggregated away


def lateness_columns(events: DataFrame) -> DataFrame:
    """Add `lat` and `disp` (both measures) to each valid delay delivery, null elsewhere."""
    delay_delivery = (
        F.col("malformed_reason").isNull()
        & (F.col("event") == "delivered")
        & F.col("due_ms").isNotNull()
    )
    # greatest() skips nulls: an unknown enqueued time leaves the due time.
    start = F.greatest(F.col("due_ms"), F.col("enqueued_ms"))
    return events.withColumns(
        {
            "lat": F.when(delay_delivery, F.col("at_ms") - F.col("due_ms")),
            "disp": F.when(delay_delivery, F.col("at_ms") - start),
        }
    )


@dataclass
class Frequencies:
    """The frequency table (persisted; small) and the figures drawn from it."""

    table: DataFrame
    late_threshold_ms: int

    @classmethod
    def of(cls, events: DataFrame, late_threshold_ms: int) -> Frequencies:
        """One aggregation over `events` (event columns, `malformed_reason`, `lat`, `disp`)."""
        valid = F.col("malformed_reason").isNull()
        keyed = events.select(
            # A malformed record counts only by its reason: its other fields are untrusted.
            *[F.when(valid, F.col(c)).alias(c) for c in ("target", "grp", "event")],
            "malformed_reason",
            F.when(F.col("lat").isNotNull(), F.floor(F.col("at_ms") / 60_000)).alias("minute"),
            "lat",
            "disp",
            F.when(valid, F.col("at_ms")).alias("at_ms"),
        )
        table = keyed.groupingSets([_BY_KIND, _BY_MINUTE], *_KEYS).agg(
            F.grouping_id(*_KEYS).alias("gid"),
            F.count("*").alias("n"),
            F.min("at_ms").alias("first_at_ms"),
            F.max("at_ms").alias("last_at_ms"),
        )
        return cls(table.persist(StorageLevel.MEMORY_AND_DISK), late_threshold_ms)

    def _by_kind(self) -> DataFrame:
        return self.table.filter(F.col("gid") == _BY_KIND_ID)

    def _deliveries(self) -> DataFrame:
        return self._by_kind().filter(F.col("lat").isNotNull())

    def counts(self) -> list[Any]:
        """Rows (target, grp, event, malformed_reason, n, first_at_ms, last_at_ms)."""
        keys = ["target", "grp", "event", "malformed_reason"]
        return (
            self._by_kind()
            .groupBy(*keys)
            .agg(
                F.sum("n").alias("n"),
                F.min("first_at_ms").alias("first_at_ms"),
                F.max("last_at_ms").alias("last_at_ms"),
            )
            .collect()
        )

    def stats(self) -> list[Any]:
        """Lateness rows overall (gid 3), per target (gid 1) and per group (gid 2)."""
        threshold = F.lit(self.late_threshold_ms)
        aggregates = [
            F.grouping_id("target", "grp").alias("gid"),
            F.sum("n").alias("n"),
            _count_if(F.col("lat") < 0).alias("early"),
            _count_if(F.col("disp") > threshold).alias("late"),
            _count_if(F.col("lat") > threshold).alias("late_end_to_end"),
        ]
        for column in _COLUMN.values():
            aggregates += _summary(column, PERCENTILES)
        sets = [[], ["target"], ["grp"]]
        return self._deliveries().groupingSets(sets, "target", "grp").agg(*aggregates).collect()

    def per_minute(self) -> list[dict[str, Any]]:
        """Lateness by delivery minute: count, p50, p99 and max of both measures."""
        by_minute = self.table.filter(
            (F.col("gid") != _BY_KIND_ID) & F.col("lat").isNotNull()
        ).groupBy("minute")
        aggregates = [F.sum("n").alias("n")]
        for column in _COLUMN.values():
            aggregates += _summary(column, (0.5, 0.99))
        rows = by_minute.agg(*aggregates).orderBy("minute").collect()
        out = []
        for r in rows:
            minute = {"minute_ms": int(r["minute"]) * 60_000, "count": int(r["n"])}
            # Keys of the end-to-end figure unchanged since schema 1; dispatch ones prefixed.
            for column, label in (("lat", ""), ("disp", "dispatch_")):
                p50, p99 = (float(x) for x in r[f"{column}_pct"])
                minute |= {
                    f"{label}p50_ms": p50,
                    f"{label}p99_ms": p99,
                    f"{label}max_ms": int(r[f"{column}_hi"]),
                }
            out.append(minute)
        return out

    def histogram(self, measure: str, summary: dict[str, Any], bins: int = 60) -> list[dict]:
        """Bucket counts of one measure; values past its p99.9 share the last bucket."""
        if not summary["count"]:
            return []
        lo = min(0, int(summary["min"]))
        hi = max(lo + bins, int(summary["p999"]) + 1)
        width = max(1, -(-(hi - lo) // bins))
        value = F.col(_COLUMN[measure])
        bucket = F.least(F.floor((value - lo) / width), F.lit(bins - 1))
        rows = (
            self._deliveries()
            .groupBy(bucket.alias("b"))
            .agg(F.sum("n").alias("n"))
            .orderBy("b")
            .collect()
        )
        return [
            {
                "from_ms": lo + int(r["b"]) * width,
                "to_ms": lo + (int(r["b"]) + 1) * width,
                "count": int(r["n"]),
            }
            for r in rows
        ]

    def unpersist(self) -> None:
        self.table.unpersist()


def measure_stats(row: Any, measure: str) -> dict[str, Any]:
    """`{count, min, mean, p50, p95, p99, p999, max}` of one measure (nulls when no delivery)."""
    if row is None or not row["n"]:
        empty: dict[str, Any] = {"count": 0, "min": None, "mean": None, "max": None}
        return empty | dict.fromkeys(PERCENTILE_NAMES)
    column = _COLUMN[measure]
    pct = (float(x) for x in row[f"{column}_pct"])
    return {
        "count": int(row["n"]),
        "min": int(row[f"{column}_lo"]),
        "mean": float(row[f"{column}_mean"]),
        "max": int(row[f"{column}_hi"]),
    } | dict(zip(PERCENTILE_NAMES, pct, strict=True))


def _count_if(condition: Column) -> Column:
    return F.sum(F.when(condition, F.col("n")).otherwise(0))


def _summary(column: str, percentiles: tuple[float, ...]) -> list[Column]:
    """Exact percentiles, min, mean and max of `column`, weighted by the counts `n`."""
    value, n = F.col(column), F.col("n")
    array = F.array(*[F.lit(p) for p in percentiles])
    return [
        F.percentile(value, array, n).alias(f"{column}_pct"),
        F.min(value).alias(f"{column}_lo"),
        # As double: lateness (up to years in ms) times a count can overflow a bigint.
        (F.sum(value.cast("double") * n) / F.sum(n)).alias(f"{column}_mean"),
        F.max(value).alias(f"{column}_hi"),
    ]
