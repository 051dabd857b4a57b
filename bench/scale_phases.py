"""The measured phases of `bench/scale.py` and `bench/sidecars.py`, on the sidecars of one
deployment: delay ingest, a burst drain and pop+ack at batch 100, each with its rate, everyone's
CPU and which node did the work."""

from __future__ import annotations

import time
import uuid

from confluent_kafka.admin import AdminClient

from bench.delay_load import (
    create_target,
    create_topic,
    now_ms,
    produce_fast,
    read_deliveries,
)
from bench.scale_parts import (
    ANSWERED,
    FORWARDED,
    SHARDS,
    CpuSnapshot,
    Fleet,
    LogCount,
    pop_and_ack,
    schedules,
    warm_up,
)


def delay_and_pop(fleet: Fleet, bootstrap: str, admin: AdminClient, n: int, broker: int) -> dict:
    """Run the three phases of n records each; for each phase its rate (`ingest`, `burst`,
    `pop`), the CPU split (`<phase>_cpu`, text), kpd's CPU per 1,000 records (`<phase>_kpd`)
    and each node's share of the work (`<phase>_share`)."""
    result: dict = {}
    log = fleet.env["KPD_DELIVERY_LOG_TOPIC"]
    buffer = fleet.env["KPD_BUFFER_TOPIC"]

    def cpu(phase: str, since: CpuSnapshot, records: int) -> None:
        now = CpuSnapshot.take(fleet, broker)
        result[f"{phase}_cpu"] = since.split(now, records)
        result[f"{phase}_kpd"] = since.kpd_per_k(now, records)

    # Ingest: n far-future schedules keyed by id, on the buffer partition of their shard.
    target = create_topic(admin, f"bench-scale-t-{uuid.uuid4().hex[:6]}")
    cpu0 = CpuSnapshot.take(fleet, broker)
    produce_fast(bootstrap, buffer, schedules(target, "i", n, now_ms() + 3_600_000))
    ingested = LogCount(bootstrap, log, "scheduled", target, n, 600)
    result["ingest"] = ingested.rate()
    cpu("ingest", cpu0, n)
    result["ingest_share"] = ingested.nodes
    # Burst: n due at one instant, on a target of its own with the broker's clock.
    # Due once all of it is scheduled: at the ingest rate just measured, with room to spare.
    # Whether it was is read from the delivery log (kpd's counters may miss a step whose
    # commit answered late), and so is who delivered it.
    burst_target = create_target(admin, f"bench-scale-b-{uuid.uuid4().hex[:6]}")
    burst_due = now_ms() + int(n / result["ingest"] * 1500) + 8_000
    produce_fast(bootstrap, buffer, schedules(burst_target, "b", n, burst_due))
    scheduled = LogCount(bootstrap, log, "scheduled", burst_target, n, 600)
    result["burst_valid"] = scheduled.count == n and scheduled.last_ms < burst_due
    # The CPU of the wait (the idle rate, and the wheel loading the burst WINDOW_MS ahead),
    # then of the drain from the due instant on, apart.
    cpu0 = CpuSnapshot.take(fleet, broker)
    time.sleep(max(burst_due - now_ms(), 0) / 1000)
    cpu1, commits0 = CpuSnapshot.take(fleet, broker), fleet.delay_commits()
    result["burst_wait_cpu"] = cpu0.split(cpu1, n)
    rows = read_deliveries(bootstrap, burst_target, n, 600)
    result["burst"] = len(rows) / max((rows[:, 1].max() - burst_due) / 1000, 1e-3)
    cpu("burst", cpu1, n)
    count, waited = (b - a for a, b in zip(commits0, fleet.delay_commits(), strict=True))
    result["burst_commits"] = (
        f"{count * 1000 / n:.1f} per 1,000, {waited / max(count, 1) * 1000:.1f} ms"
    )
    result["burst_share"] = LogCount(bootstrap, log, "delivered", burst_target, n, 120).nodes
    # Pop + ack at batch 100 from 4 client processes, spread over the sidecars' ports.
    topic = create_topic(admin, f"bench-scale-p-{uuid.uuid4().hex[:6]}", SHARDS)
    produce_fast(bootstrap, topic, ((f"p-{i}".encode(), []) for i in range(n)))
    group = f"g-{uuid.uuid4().hex[:6]}"
    n_pop = n - warm_up(fleet.urls[0], group, topic)
    cpu0 = CpuSnapshot.take(fleet, broker)
    forwarded0, answered0 = fleet.calls(FORWARDED), fleet.calls(ANSWERED)
    acked, seconds = pop_and_ack(fleet.urls, group, topic, n_pop)
    result["pop"] = acked / seconds
    cpu("pop", cpu0, acked)
    result["pop_share"] = LogCount(bootstrap, log, "delivered", topic, acked, 120).nodes
    result["pop_forwarded"] = dict(fleet.calls(FORWARDED) - forwarded0)
    answered = fleet.calls(ANSWERED) - answered0
    result["pop_calls"] = {call: answered[call] * 1000 / acked for call in ("pop", "ack")}
    return result
