"""What became of each delay schedule id in the log (step 3 of `spark.reconcile`): missing (not
resolved `grace_ms` past its due time), pending (not resolved, not that overdue yet) or
duplicated (delivered more than once). Pop deliveries carry a `group` and are left out
(`spark.reconcile` says why).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

# An `invalid` event with a schedule's id settled it to kpd.invalid (e.g. its target vanished).
RESOLVING = ("delivered", "cancelled", "invalid")


def valid_delay(events: DataFrame) -> DataFrame:
    """The delay events that parsed: not malformed, and without a pop `group`."""
    return events.filter(F.col("malformed_reason").isNull() & F.col("grp").isNull())


def per_schedule(events: DataFrame, end_ms: int | None, grace_ms: int) -> DataFrame:
    """One row per missing, pending or duplicated schedule id: (id, kind, target, ...)."""
    scheduled = F.col("event") == "scheduled"
    delivered = F.col("event") == "delivered"
    scheduled_at = F.when(scheduled, F.col("at_ms"))
    # A re-scheduled id counts once, with its latest schedule.
    latest = F.max_by(F.when(scheduled, F.struct("target", "due_ms", "node")), scheduled_at)
    per_id = (
        valid_delay(events)
        .filter(F.col("event").isin("scheduled", *RESOLVING))
        .groupBy("id")
        .agg(
            latest.alias("s"),
            F.max(scheduled_at).alias("scheduled_at_ms"),
            F.count_if(F.col("event").isin(*RESOLVING)).alias("resolved"),
            F.count_if(delivered).alias("deliveries"),
            F.min(F.when(delivered, F.col("target"))).alias("delivered_target"),
        )
    )
    end = F.lit(end_ms if end_ms is not None else 0).cast("bigint")
    due = F.col("s.due_ms")
    kind = F.when(F.col("deliveries") > 1, "duplicates").when(
        F.col("s").isNotNull() & (F.col("resolved") == 0),
        F.when(due + F.lit(grace_ms) <= end, "missing").otherwise("pending"),
    )
    return per_id.select(
        "id",
        kind.alias("kind"),
        F.coalesce(F.col("s.target"), F.col("delivered_target")).alias("target"),
        F.lit(None).cast("string").alias("grp"),
        due.alias("due_ms"),
        "scheduled_at_ms",
        F.col("s.node").alias("node"),
        (end - due).alias("overdue_ms"),
    ).filter(F.col("kind").isNotNull())
