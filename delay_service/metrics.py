"""Prometheus metrics of the delay service."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

PENDING = Gauge(
    "kpd_schedules_pending",
    "Schedules waiting for their due time, per shard led here",
    ["shard"],
    multiprocess_mode="livesum",
)
DUE_BACKLOG = Gauge(
    "kpd_due_backlog",
    "Schedules already due but not yet delivered, per shard led here",
    ["shard"],
    multiprocess_mode="livesum",
)
WINDOW_HELD = Gauge(
    "kpd_window_held_bytes",
    "Schedules due inside the wheel's window held in memory (bytes, roughly), per shard led here",
    ["shard"],
    multiprocess_mode="livesum",
)
INDEX_READS = Counter(
    "kpd_schedule_index_reads_total",
    "Schedules the delay leader read from RocksDB: new ids checked at ingest, and due ones "
    "not held in memory",
)
SCHEDULED = Counter("kpd_schedules_scheduled_total", "Schedules accepted from the buffer topic")
DELIVERED = Counter("kpd_schedules_delivered_total", "Schedules delivered to their target")
CANCELLED = Counter("kpd_schedules_cancelled_total", "Schedules cancelled before delivery")
INGEST_WAITS = Counter(
    "kpd_delay_ingest_waits_total",
    "Steps in which a shard's delay leader held buffer records it had read because another "
    "shard of this worker had the ingest turn (delay_service.ingest_turns)",
)
INGEST_YIELDS = Counter(
    "kpd_delay_ingest_yields_total",
    "Steps that ended their ingest early to commit the deliveries they carried: a delivery "
    "becomes visible only with its step's commit",
)
INVALID = Counter("kpd_buffer_invalid_total", "Buffer records sent to the invalid topic")
LATENESS = Histogram(
    "kpd_delivery_lateness_seconds",
    "When a delivery became visible (its transaction committed) minus its due time",
    buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
FORWARDED = Counter(
    "kpd_schedule_forwarded_total",
    "Schedule calls sent on to the owner of the schedule's shard, because this worker's index "
    "does not follow that shard (get, cancel, schedule)",
    ["call"],
)
STORES_REBUILT = Counter(
    "kpd_shard_stores_rebuilt_total",
    "Delay role starts that rebuilt their shard's index from Kafka into a store of their own, "
    "the shared one held too long by another worker (a stopped process)",
)
START_READS = Counter(
    "kpd_delay_start_records_total",
    "Schedule records a delay role read at its start, before and after its fence: those its "
    "shard's store lacked (a store as its last writer left it, on this machine, lacks few)",
    ["shard"],
)
