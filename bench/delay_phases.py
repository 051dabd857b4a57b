"""The sidecar `bench/delay.py` measures and its phases: due records at a steady rate (with
far-future ingest alongside), short delays at a trickle, a rebuild of an empty index, and the
broker's warm-up."""

import argparse
import shutil
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from bench import broker_jit, call_time, gc_pauses
from bench.delay_load import (
    VALUE,
    PacedIngest,
    buffer_records,
    consumer,
    create_target,
    create_topic,
    lateness_row,
    now_ms,
    produce_fast,
    raw_loop,
    read_deliveries,
)
from devtools.local_sidecar import SidecarProcess, isolated_env

# Records due later than this rate of ingest needs: each is scheduled before it is due, so the
# lateness measured is dispatch's, not ingest's (the slowest ingest seen here: 6-7k/s, 8 shards).
INGEST_FLOOR_PER_S = 5_000
TRICKLE_N, TRICKLE_DELAY_MS, TRICKLE_EVERY_S = 200, 20, 0.025
# A round of the broker's warm-up (`bench/broker_jit.py`): records per raw loop, and a mixed phase
# of this many seconds at these rates (due and far-future per second), the measured one's defaults.
WARM_UP_RAW_N, WARM_UP_ROUND_S, WARM_UP_RATE, WARM_UP_INGEST = 20_000, 20, 5_000, 15_000


class Sidecar(SidecarProcess):
    def __init__(self, bootstrap: str, home: Path, shards: int = 2) -> None:
        namespace = f"bench-{uuid.uuid4().hex[:6]}"
        env = isolated_env(
            bootstrap, "bench", home / "data", namespace, log_level="WARNING", shards=str(shards)
        )
        super().__init__(env, home / "sidecar.log")
        self.buffer = env["KPD_BUFFER_TOPIC"]
        prefix = env["KPD_STATE_TOPIC_PREFIX"]
        self.topics = [  # what kpd writes (the buffer is written by the bench)
            env["KPD_INVALID_TOPIC"],
            env["KPD_DELIVERY_LOG_TOPIC"],
            *(f"{prefix}{name}" for name in ("schedules", "delay-inbox", "pop-state", "leader")),
        ]

    def start(self) -> float:
        return self.launch(timeout_s=900)

    def index_reads(self) -> float | None:
        """Schedules the delay leaders read from RocksDB so far (None: a sidecar without it)."""
        return self.metrics().get("kpd_schedule_index_reads_total")

    def wait_delivering(self, target: str) -> None:
        sid = f"warm-{uuid.uuid4().hex[:6]}"
        httpx.post(
            f"{self.url}/v1/topics/{target}/messages",
            json={"messages": [{"value": "w", "delay_ms": 0, "id": sid}]},
            timeout=30,
        ).raise_for_status()
        deadline = time.monotonic() + 60
        while httpx.get(f"{self.url}/v1/schedules/{sid}").json().get("state") != "delivered":
            if time.monotonic() > deadline:
                raise RuntimeError("leader not delivering")
            time.sleep(0.05)

    def wait_scheduled(self, total: int, max_wait_s: float) -> tuple[int, float, float]:
        """Poll kpd_schedules_scheduled_total until `total`; (reached, rate/s, seconds)."""
        first: tuple[float, float] | None = None
        last = (time.monotonic(), 0.0)
        deadline = time.monotonic() + max_wait_s
        while time.monotonic() < deadline:
            count = self.metrics().get("kpd_schedules_scheduled_total", 0.0)
            t = time.monotonic()
            if count > 0 and first is None:
                first = (t, count)
            if count > last[1]:
                last = (t, count)
            if count >= total:
                break
            time.sleep(0.2)
        if first is None or last[0] <= first[0]:
            return int(last[1]), 0.0, 0.0
        seconds = last[0] - first[0]
        return int(last[1]), (last[1] - first[1]) / seconds, seconds


def sustained(
    bootstrap: str, admin: AdminClient, sidecar: Sidecar, args: argparse.Namespace, ingest_rate: int
) -> str:
    """Records due at `args.rate` per second, all scheduled before the first is due; meanwhile
    far-future schedules arrive at `ingest_rate` per second. The lateness figures."""
    target = create_target(admin, f"bench-rate-{uuid.uuid4().hex[:6]}")
    n = args.rate * args.seconds
    before = int(sidecar.metrics().get("kpd_schedules_scheduled_total", 0))
    lead_ms = int(n / INGEST_FLOOR_PER_S * 1000) + 8000
    start_ms = now_ms() + lead_ms
    interval = 1000 / args.rate
    produce_fast(
        bootstrap,
        sidecar.buffer,
        buffer_records(target, n, (start_ms + int(i * interval) for i in range(n)), "rate-"),
    )
    scheduled, _, _ = sidecar.wait_scheduled(before + n, lead_ms / 1000)
    if now_ms() > start_ms:
        print(f"  !! only {scheduled - before} of {n} scheduled before the first was due")
    far = create_topic(admin, f"bench-far-{uuid.uuid4().hex[:6]}")
    ingest = PacedIngest(bootstrap, sidecar.buffer, far, ingest_rate, args.seconds)
    time.sleep(max(0.0, (start_ms - now_ms()) / 1000))  # the far-future load starts with the dues
    gc_before, reads_before = gc_pauses.read(sidecar.url), sidecar.index_reads()
    times_before = call_time.read(sidecar.url)
    if ingest_rate:
        ingest.start()
    rows = read_deliveries(bootstrap, target, n, args.seconds + 120)
    gc_row = gc_pauses.read(sidecar.url).minus(gc_before).row()
    waits = call_time.read(sidecar.url).minus(times_before).steps_row("delay")
    reads = reads_text(reads_before, sidecar.index_reads())
    if ingest_rate:
        # Due deliveries go first: how far ingest kept up while they flowed, and its lag after.
        flowed = int(sidecar.metrics().get("kpd_schedules_scheduled_total", 0)) - before - n
        ended = time.monotonic()
        ingest.join()
        total = before + n + ingest.sent
        reached, _, _ = sidecar.wait_scheduled(total, 120)
        load = (
            f"while {ingest.sent:,} far-future schedules arrived at {ingest.rate:,.0f}/s "
            f"({flowed:,} of them scheduled when the last due record was read, "
            f"{reached - before - n:,} {time.monotonic() - ended:.1f} s later); "
        )
    else:
        load = ""
    early = int((rows[:, 1] < rows[:, 0]).sum())
    return (
        f"{args.rate}/s due for {args.seconds} s, {load}{len(rows)} delivered, {early} early; "
        f"lateness at the broker (LogAppendTime) {lateness_row(rows, 1)}; "
        f"read_committed-visible lateness {lateness_row(rows, 2)}; {reads}; GC pauses: {gc_row}; "
        f"{waits}"
    )


def trickle(bootstrap: str, admin: AdminClient, sidecar: Sidecar) -> str:
    """Schedules due TRICKLE_DELAY_MS after they are produced, one at a time: the lateness of a
    short delay when nothing else arrives to fill the leader's reads."""
    target = create_target(admin, f"bench-trickle-{uuid.uuid4().hex[:6]}")
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    reader = consumer(bootstrap, target)  # reading while they come due, for the visible lateness
    with ThreadPoolExecutor(1) as pool:
        reading = pool.submit(read_deliveries, bootstrap, target, TRICKLE_N, 60, reader)
        for i in range(TRICKLE_N):
            due_ms = now_ms() + TRICKLE_DELAY_MS
            [(key, headers)] = buffer_records(target, 1, iter([due_ms]), f"trickle-{i}-")
            producer.produce(sidecar.buffer, VALUE, key, headers=headers)
            producer.poll(0)
            time.sleep(TRICKLE_EVERY_S)
        assert producer.flush(30) == 0
        rows = reading.result()
    early = int((rows[:, 1] < rows[:, 0]).sum())
    return (
        f"{TRICKLE_N} schedules due {TRICKLE_DELAY_MS} ms after they were produced, one every "
        f"{TRICKLE_EVERY_S * 1000:.0f} ms: {len(rows)} delivered, {early} early; lateness at the "
        f"broker {lateness_row(rows, 1)}; read_committed-visible {lateness_row(rows, 2)}"
    )


def rebuild(bootstrap: str, sidecar: Sidecar, restart_s: float) -> str:
    """Start on an empty index: the sidecar reads all of `kpd.schedules` before it delivers, as a
    member does that takes over shards it did not follow (docs/architecture.md). The
    rate counts the records between each partition's start and end offsets (compaction may have
    removed some), over the time beyond a restart's."""
    shutil.rmtree(sidecar.data_dir / "shards")
    topic = f"{sidecar.env['KPD_STATE_TOPIC_PREFIX']}schedules"
    probe = consumer(bootstrap, topic)
    try:
        spans = [
            probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            for p in probe.list_topics(topic, timeout=10).topics[topic].partitions
        ]
    finally:
        probe.close()
    records = sum(high - low for low, high in spans)
    ready_s = sidecar.start()
    sidecar.stop()
    extra_s = max(ready_s - restart_s, 0.001)
    return (
        f"rebuild of an empty index from {records:,} kpd.schedules records: ready in "
        f"{ready_s:.1f} s, {extra_s:.1f} s more than a restart ({records / extra_s:,.0f} records/s)"
    )


def reads_text(before: float | None, after: float | None) -> str:
    """RocksDB reads of schedule state during a phase: new ids checked at ingest, and due
    schedules the leader did not hold in memory."""
    if before is None or after is None:
        return "RocksDB schedule reads not reported"
    return f"{after - before:,.0f} RocksDB schedule reads"


def warm_up_broker(
    bootstrap: str, admin: AdminClient, home: Path, shards: int, broker: int, max_s: float
) -> None:
    """Rounds of both raw loops and a mixed phase on a sidecar of its own (its schedules
    stay out of the measured one's counts), until the broker's JIT compiler is quiet: the raw
    loops alone left kpd's first phase with 14 core-s of compiling, and with mixed phases of 5 s
    it still took 12 (2026-11-27 02:39 and 02:46)."""
    sidecar = Sidecar(bootstrap, home, shards)
    phase = argparse.Namespace(rate=WARM_UP_RATE, seconds=WARM_UP_ROUND_S)

    def one_round() -> None:
        for transactional in (False, True):
            raw_loop(bootstrap, admin, WARM_UP_RAW_N, transactional)
        sustained(bootstrap, admin, sidecar, phase, WARM_UP_INGEST)

    sidecar.start()
    try:
        warm = broker_jit.warm_up(broker, one_round, max_s)
    finally:
        sidecar.stop()
    print(f"broker warm-up (raw loops and kpd's mixed phase, not counted): {warm.text()}")
