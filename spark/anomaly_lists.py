"""The audit's anomaly tables (step 4 of `spark.reconcile`): the early, late and malformed rows
of the log, the missing schedule ids, and each duplicated id with its deliveries. At most `limit`
rows each, as Arrow tables the driver writes; a kind whose count is zero costs no Spark job.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark.parse import EVENT_COLUMNS, INTERNAL_NAMES
from spark.schedule_outcomes import valid_delay

ANOMALY_KINDS = ("early", "late", "missing", "duplicates", "malformed")


def anomaly_lists(
    events: DataFrame,
    schedules: DataFrame,
    counts: dict[str, int],
    late_threshold_ms: int,
    limit: int,
) -> dict[str, pa.Table]:
    """Anomaly tables (at most `limit` rows each); no Spark job for a kind with none."""
    early = F.col("lat") < 0
    late = F.col("disp") > late_threshold_ms
    malformed = F.col("malformed_reason").isNotNull()
    conditions = {"early": early, "late": late, "malformed": malformed}
    wanted = [cond for kind, cond in conditions.items() if counts[kind]]
    flagged = events.filter(_any(wanted)).persist() if wanted else events.limit(0)

    def deliveries(condition: Column) -> DataFrame:
        lateness = {"lateness_ms": F.col("lat"), "dispatch_lateness_ms": F.col("disp")}
        return (
            flagged.filter(condition)
            .select(*EVENT_COLUMNS, *lateness.values())
            .toDF(*EVENT_COLUMNS, *lateness)
        )

    missing = schedules.filter(F.col("kind") == "missing").drop("kind")
    try:
        return {
            "early": _arrow(deliveries(early), limit, "lateness_ms"),
            "late": _arrow(deliveries(late), limit, "dispatch_lateness_ms", descending=True),
            "missing": _arrow(missing, limit, "due_ms"),
            "duplicates": _arrow(_duplicates(events, schedules, counts), limit, "id"),
            "malformed": _arrow(
                flagged.filter(malformed).select(
                    "source", F.col("malformed_reason").alias("reason"), "raw"
                ),
                limit,
                None,
            ),
        }
    finally:
        flagged.unpersist()


def _any(conditions: list[Column]) -> Column:
    out = conditions[0]
    for condition in conditions[1:]:
        out = out | condition
    return out


def _duplicates(events: DataFrame, schedules: DataFrame, counts: dict[str, int]) -> DataFrame:
    """Each duplicated id with its deliveries (the ids are few: a broadcast semi-join)."""
    delivered = valid_delay(events).filter(F.col("event") == "delivered")
    if counts["duplicates"]:
        ids = schedules.filter(F.col("kind") == "duplicates").select("id")
        delivered = delivered.join(F.broadcast(ids), "id", "left_semi")
    else:
        delivered = delivered.limit(0)
    return delivered.groupBy("id").agg(
        F.count("*").alias("deliveries"),
        F.min("target").alias("target"),
        F.min("grp").alias("grp"),
        F.min("due_ms").alias("due_ms"),
        F.min("at_ms").alias("first_at_ms"),
        F.max("at_ms").alias("last_at_ms"),
        F.array_join(F.array_sort(F.collect_set("node")), ",").alias("nodes"),
    )


def _arrow(df: DataFrame, limit: int, order: str | None, descending: bool = False) -> pa.Table:
    """Anomaly list → Arrow (written by the driver as one file, also under spark-submit)."""
    external = {v: k for k, v in INTERNAL_NAMES.items() if v in df.columns}
    out = df.withColumnsRenamed(external)
    if order is not None:
        out = out.orderBy(F.col(order).desc() if descending else F.col(order), "id")
    return out.limit(limit).toArrow()
