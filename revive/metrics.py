"""Prometheus metrics of pop consumption."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

POPPED = Counter("kpd_pop_messages_total", "Messages handed out by pop (each delivery)")
ACKED = Counter("kpd_pop_acked_total", "Deliveries acked")
RETRIED = Counter("kpd_pop_retried_total", "Messages copied to a retry topic (nack or expiry)")
DEAD_LETTERED = Counter("kpd_pop_dead_lettered_total", "Messages copied to a dead-letter topic")
COPY_READS = Counter(
    "kpd_pop_copy_reads_total",
    "Messages read back from Kafka to copy them (retry, dead letter): not held by the leader",
)
HELD_BYTES = Gauge(
    "kpd_pop_held_bytes",
    "Records handed out and not yet settled, held for their copies (bytes, roughly), per shard "
    "led here",
    ["shard"],
    multiprocess_mode="livesum",
)
REQUEST_SECONDS = Histogram(
    "kpd_pop_request_seconds",
    "Time to answer pop-group calls (leader side)",
    ["call"],
    buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 5, 20),
)
FORWARDED = Counter(
    "kpd_pop_forwarded_total",
    "Pop-group calls this sidecar sent on to the owner of a shard (pop, watch, ack, nack, "
    "leases, reject, stats)",
    ["call"],
)
PARTIAL_POPS = Counter(
    "kpd_pop_partial_total",
    "Pops answered with what some shards leased while another shard or owner failed",
)
ARRIVAL_WAKES = Counter(
    "kpd_pop_arrival_wakes_total",
    "Pop services woken at once because records arrived for a parked long poll",
)
PARKED = Gauge(
    "kpd_pop_parked", "Pop calls waiting for messages (long polls)", multiprocess_mode="livesum"
)
STANDBY_CHECKPOINTS = Gauge(
    "kpd_pop_standby_checkpoints",
    "Checkpoints the hot standby still places in the pop-state topic (for a takeover's replay "
    "floor); their leaders' released ones are forgotten every few seconds",
    multiprocess_mode="livesum",
)
