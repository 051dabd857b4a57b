"""Prometheus metrics shared by the whole process (one default registry, served at /metrics)."""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter as Tally
from collections.abc import Sequence
from functools import partial

from prometheus_client import Counter, Gauge, Histogram

# Several worker processes share one /metrics (prometheus_client's multiprocess mode): gauges
# say how their values combine across the live workers.
KAFKA_REACHABLE = Gauge(
    "kpd_kafka_reachable", "1 when the last metadata probe answered", multiprocess_mode="livemin"
)
IS_LEADER = Gauge("kpd_leader", "1 while this sidecar leads a shard", multiprocess_mode="livemax")
# Supervised loops (delay and pop roles, per shard): restarts and stalls.
LEADER_RESTARTS = Counter(
    "kpd_leader_restarts_total",
    "Leader roles restarted after a failure, by role, shard and reason",
    ["role", "shard", "reason"],
)
LOOP_STALLED = Gauge(
    "kpd_loop_stalled_seconds",
    "How long a supervised loop's current step has run past its stall bound (0: progressing)",
    ["role", "shard"],
    multiprocess_mode="livemax",
)
# Early takeover (`cluster.successor`), by why the watched member was taken for gone: `refused`
# (nothing listens at its address) or `silent` (no answer for a while); and its false alarms.
EARLY_TAKEOVERS = Counter(
    "kpd_early_takeovers_total",
    "Takeovers of a watched sidecar's shards before its group session ended, by cause",
    ["cause"],
)
EARLY_TAKEOVER_FALSE_ALARMS = Counter(
    "kpd_early_takeover_false_alarms_total",
    "Sidecars taken over on silence that answered again (alive after all)",
)
SHARD_STANDBY = Gauge(
    "kpd_shard_standby",
    "1 for each shard whose pop state this sidecar keeps hot, to take it over next",
    ["shard"],
    multiprocess_mode="livemax",
)
SHARD_SCHEDULES_KEPT = Gauge(
    "kpd_shard_schedules_kept",
    "How many of this sidecar's workers keep a shard's schedules in a standby (1 for another "
    "sidecar's shards, 0 for the sidecar's own: their stores are on its disk)",
    ["shard"],
    multiprocess_mode="livesum",
)
# What a hot standby costs its worker, in the worker's own terms: with two workers, the standby's
# apply of the other's deliveries was the burst's main rise in CPU per record.
STANDBY_CPU = Counter(
    "kpd_standby_cpu_seconds",
    "CPU time the standby's thread spent following the shards led elsewhere (its steps)",
)
SHARD_LEADER = Gauge(
    "kpd_shard_leader",
    "1 for each shard this sidecar leads",
    ["shard"],
    multiprocess_mode="livemax",
)
OWNERS_VIEW_AGE = Gauge(
    "kpd_shard_owners_view_age_seconds",
    "How old this worker's view of who leads each shard is (refreshed every second; calls for "
    "other shards are sent by it; older than 10 s, /readyz says so)",
    multiprocess_mode="livemax",
)
LEADERLESS = Gauge(
    "kpd_shards_leaderless_seconds",
    "How long this worker's view of the group has shown no shard with a leader (0 while one "
    "has one; past 15 s, /readyz says so)",
    multiprocess_mode="livemax",
)
CLOCK_OFFSET = Gauge(
    "kpd_clock_offset_ms",
    "This node's wall clock minus the broker's, from the LogAppendTime of its own writes",
    multiprocess_mode="livemax",
)
# Where a leader step's transaction waits on the broker, by role (delay, pop) and phase: `write`
# until the broker took the step's records (AddPartitionsToTxn, then Produce), `offsets` for
# sending consumer offsets into it (AddOffsetsToTxn, TxnOffsetCommit), `commit` for EndTxn.
# A pop or an ack is answered only after all three.
TRANSACTION_SECONDS = Histogram(
    "kpd_transaction_seconds",
    "Time a leader step's transaction waited on the broker, by role and phase (write, offsets, "
    "commit)",
    ["role", "phase"],
    buckets=(0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1, 0.25, 1, 5),
)


def observe_all(histogram: Histogram, amounts: Sequence[float]) -> None:
    """`histogram.observe(a)` for each of `amounts`, with one update of the sum and of each bucket
    touched. In multiprocess mode every update takes the process's metrics lock and writes a
    memory-mapped file: an observe cost 2.6 us against 1.2 in one process, and a delay step
    delivers thousands of records. prometheus_client has no
    public call for many observations; this uses the `_sum`, `_buckets` and `_upper_bounds` its
    `observe` uses (tests/unit/test_observe_all.py holds it to `observe`'s results)."""
    if not amounts:
        return
    histogram._sum.inc(sum(amounts))
    bounds = histogram._upper_bounds  # ascending, the last +Inf: `observe` takes the first >=
    # map and partial run in C: no Python call per amount, as a generator's resumption is.
    for bucket, count in Tally(map(partial(bisect_left, bounds), amounts)).items():
        histogram._buckets[bucket].inc(count)
