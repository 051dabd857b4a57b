"""Benchmark of the delay service against a raw confluent-kafka consume->produce loop.

    .venv/bin/python bench/delay.py                      # local broker under .kpd/bench-kafka
    KPD_BOOTSTRAP=127.0.0.1:9092 .venv/bin/python bench/delay.py --pending 1000000

One run, one broker, one `kpd run` process (real Kafka, real RocksDB). Uncounted rounds of the raw
loops and of a mixed phase (on a sidecar of their own) first run until the fresh broker's JIT
compiler is quiet (`bench/broker_jit.py`; bounded by `--warm-up-s`; not with KPD_BOOTSTRAP), and
each phase prints what the compiler used meanwhile. Then it prints:
  * raw loop: consume N records from a topic and produce them to another, plain and
    transactional (2000 records per transaction, offsets in the transaction), the physical
    reference on this machine;
  * ingest: N buffer records already on the buffer topic when the sidecar starts, schedules/s from
    the first to the last `kpd_schedules_scheduled_total` increment;
  * sustained dispatch: records due at a fixed rate (default 5k/s for 20 s), scheduled before the
    first is due; lateness = the broker's append time of the delivered record (its target topic
    has message.timestamp.type=LogAppendTime) - kpd-deliver-at, and visible lateness = when a
    read_committed consumer got it - kpd-deliver-at;
  * mixed load: the same, while far-future schedules arrive on the buffer topic at --mixed-ingest
    per second (default 15k/s) for as long as the due records flow;
  * short delays at a trickle: schedules due 20 ms after they are produced, one every 25 ms, the
    same two lateness figures (nothing else fills the leader's reads);
  * burst: N records due in the same millisecond; drain rate = N / (last delivery - due);
  * what the broker wrote per scheduled record (the burst's ingest) and per delivery (its drain),
    records and bytes by topic (`bench/broker_writes.py`);
  * the sidecar's garbage-collection pauses during each lateness phase (`bench/gc_pauses.py`),
    and its RocksDB reads of schedule state (a new id's check at ingest, a due schedule it did
    not hold in memory);
  * RSS (VmRSS) of the sidecar with 0 and with each --pending count of far-future schedules,
    right after their ingest and again once the worker has handed freed memory back.
Every record is 100 bytes of value, a 16-byte key and one user header.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import broker_jit, call_time, gc_pauses  # noqa: E402
from bench.broker_writes import snapshot  # noqa: E402
from devtools.broker_for_tests import broker_for_tests  # noqa: E402
from devtools.local_sidecar import SidecarProcess, isolated_env  # noqa: E402
from foundation.kafka_clients import consume_ready  # noqa: E402

VALUE = b"v" * 100
DAY_MS = 24 * 3600 * 1000
SETTLE_S = 15.0  # longer than memory_trim's period (10 s): RSS once freed memory is handed back


# Records due later than this rate of ingest needs: each is scheduled before it is due, so the
# lateness measured is dispatch's, not ingest's (the slowest ingest seen here: 6-7k/s, 8 shards).
INGEST_FLOOR_PER_S = 5_000
TRICKLE_N, TRICKLE_DELAY_MS, TRICKLE_EVERY_S = 200, 20, 0.025
# A round of the broker's warm-up (`bench/broker_jit.py`): records per raw loop, and a mixed phase
# of this many seconds at these rates (due and far-future per second), the measured one's defaults.
WARM_UP_RAW_N, WARM_UP_ROUND_S, WARM_UP_RATE, WARM_UP_INGEST = 20_000, 20, 5_000, 15_000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# -- Kafka helpers ---------------------------------------------------------------------------


def create_topic(admin: AdminClient, name: str, partitions: int = 1) -> str:
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)
    return name


def create_target(admin: AdminClient, name: str) -> str:
    """A target topic whose record timestamps are the broker's append time: lateness at the
    broker, not from the CreateTime kpd sets itself."""
    config = {"message.timestamp.type": "LogAppendTime"}
    admin.create_topics([NewTopic(name, 1, 1, config=config)])[name].result(timeout=30)
    return name


def produce_fast(bootstrap: str, topic: str, records: Iterator[tuple[bytes, list]]) -> float:
    """Produce (key, headers) records with VALUE; return records/s of the producer."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 1_000_000,
            "partitioner": "murmur2_random",  # Java clients' default: a key's partition as kpd's
        }
    )
    count, start = 0, time.monotonic()
    for key, headers in records:
        while True:
            try:
                producer.produce(topic, VALUE, key, headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
        count += 1
        if count % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return count / (time.monotonic() - start)


def consumer(bootstrap: str, topic: str, **extra: object) -> Consumer:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 5,
            **extra,
        }
    )
    partitions = c.list_topics(topic, timeout=10).topics[topic].partitions
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    return c


def read_deliveries(
    bootstrap: str, topic: str, n: int, timeout_s: float, c: Consumer | None = None
) -> np.ndarray:
    """Read n records (with `c`, a consumer of `topic` made beforehand); rows of (due, broker
    timestamp, received at) in ms."""
    c = c or consumer(bootstrap, topic)
    rows = np.zeros((n, 3), dtype=np.int64)
    got, deadline = 0, time.monotonic() + timeout_s
    while got < n and time.monotonic() < deadline:
        for m in consume_ready(c, 5000, 0.05):  # a batch consume would hold records 50 ms
            if m.error() is not None:
                continue
            received = now_ms()
            due = next(int(v) for k, v in m.headers() if k == "kpd-deliver-at")
            if got < n:
                rows[got] = (due, m.timestamp()[1], received)
            got += 1
    c.close()
    if got < n:
        print(f"  !! only {got} of {n} delivered within {timeout_s:.0f} s")
    return rows[: min(got, n)]


def raw_loop(bootstrap: str, admin: AdminClient, n: int, transactional: bool) -> float:
    """Consume n records from a pre-filled topic and produce them to another; records/s."""
    source = create_topic(admin, f"bench-raw-src-{uuid.uuid4().hex[:6]}")
    sink = create_topic(admin, f"bench-raw-sink-{uuid.uuid4().hex[:6]}")
    produce_fast(bootstrap, source, ((f"key-{i:012d}".encode(), [("h", b"1")]) for i in range(n)))
    config: dict[str, object] = {"bootstrap.servers": bootstrap, "linger.ms": 1}
    if transactional:
        config["transactional.id"] = f"bench-raw-{uuid.uuid4().hex[:6]}"
    producer = Producer(config)
    c = consumer(bootstrap, source, **{"group.id": f"bench-raw-{uuid.uuid4().hex[:6]}"})
    if transactional:
        producer.init_transactions(30)
    done, start = 0, None
    while done < n:
        batch = [m for m in c.consume(2000, 0.5) if m.error() is None]
        if not batch:
            continue
        start = start or time.monotonic()
        if transactional:
            producer.begin_transaction()
        for m in batch:
            while True:
                try:
                    producer.produce(sink, m.value(), m.key(), headers=m.headers())
                    break
                except BufferError:
                    producer.poll(0.01)
        if transactional:
            producer.send_offsets_to_transaction(
                c.position(c.assignment()), c.consumer_group_metadata(), 30
            )
            producer.commit_transaction(30)
        else:
            producer.poll(0)
        done += len(batch)
    producer.flush(60)
    c.close()
    assert start is not None
    return n / (time.monotonic() - start)


# -- the sidecar -------------------------------------------------------------------------------


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


def buffer_records(target: str, n: int, due: Iterator[int], prefix: str) -> Iterator:
    for i, due_ms in zip(range(n), due, strict=False):
        yield (
            f"{prefix}{i:012d}".encode()[-16:],
            [
                ("h", b"1"),
                ("kpd-target", target.encode()),
                ("kpd-deliver-at", str(due_ms).encode()),
            ],
        )


class PacedIngest(threading.Thread):
    """Far-future schedules produced at a steady rate: other producers' load on the buffer topic
    while due records flow (they must not make those late)."""

    def __init__(self, bootstrap: str, buffer: str, target: str, rate: int, seconds: float):
        super().__init__(daemon=True)
        self._servers, self._buffer, self._target = bootstrap, buffer, target
        self._rate, self._seconds = rate, seconds
        self.sent = 0
        self.rate = 0.0

    def run(self) -> None:
        producer = Producer(
            {"bootstrap.servers": self._servers, "linger.ms": 5,
             "partitioner": "murmur2_random"}
        )  # fmt: skip
        far = now_ms() + DAY_MS
        records = buffer_records(self._target, 10**9, iter(lambda: far, None), "mixed-")
        started = time.monotonic()
        while (elapsed := time.monotonic() - started) < self._seconds:
            for key, headers in itertools.islice(records, int(self._rate * elapsed) - self.sent):
                producer.produce(self._buffer, VALUE, key, headers=headers)
                self.sent += 1
            producer.poll(0)
            time.sleep(0.005)
        self.rate = self.sent / (time.monotonic() - started)
        assert producer.flush(60) == 0


def lateness_row(rows: np.ndarray, column: int) -> str:
    late = rows[:, column] - rows[:, 0]
    p50, p99, p999 = np.percentile(late, [50, 99, 99.9])
    return f"p50 {p50:.0f} ms  p99 {p99:.0f} ms  p999 {p999:.0f} ms  max {late.max()} ms"


# -- the run -----------------------------------------------------------------------------------


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
    member does that takes over shards it did not follow (README, KPD_STANDBY_SCHEDULES). The
    rate counts the records between each partition's start and end offsets (compaction may have
    removed some), over the time beyond a restart's."""
    shutil.rmtree(sidecar.data_dir / "rocksdb")
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


def run(bootstrap: str, args: argparse.Namespace) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    home = Path(tempfile.mkdtemp(prefix="kpd-bench-"))
    results: dict[str, str] = {}
    print(f"broker {bootstrap}; sidecar files in {home}")

    broker = broker_jit.local_broker()
    if args.warm_up_s > 0 and broker is not None:
        warm_up_broker(bootstrap, admin, home / "warm-up", args.shards, broker, args.warm_up_s)
    jit = broker_jit.CompilerMeter(broker)
    raw_plain = raw_loop(bootstrap, admin, args.raw_n, transactional=False)
    raw_txn = raw_loop(bootstrap, admin, args.raw_n, transactional=True)
    print(
        f"raw consume->produce: {raw_plain:,.0f}/s plain, {raw_txn:,.0f}/s transactional; "
        f"{jit.text()}"
    )

    sidecar = Sidecar(bootstrap, home, args.shards)
    try:
        sidecar.start()
        warm = create_topic(admin, f"bench-warm-{uuid.uuid4().hex[:6]}")
        sidecar.wait_delivering(warm)
        rss0 = sidecar.rss_mb()
        print(f"RSS with 0 pending: {rss0:.0f} MB")

        results["dispatch"] = broker_jit.with_compiler_cpu(
            broker, lambda: sustained(bootstrap, admin, sidecar, args, ingest_rate=0)
        )
        print("sustained:", results["dispatch"])
        results["mixed"] = broker_jit.with_compiler_cpu(
            broker, lambda: sustained(bootstrap, admin, sidecar, args, args.mixed_ingest)
        )
        print("mixed:", results["mixed"])
        results["trickle"] = broker_jit.with_compiler_cpu(
            broker, lambda: trickle(bootstrap, admin, sidecar)
        )
        print("trickle:", results["trickle"])

        # Burst: N due in the same millisecond.
        jit = broker_jit.CompilerMeter(broker)
        target = create_target(admin, f"bench-burst-{uuid.uuid4().hex[:6]}")
        before = sidecar.metrics().get("kpd_schedules_scheduled_total", 0)
        due = now_ms() + int(args.burst / INGEST_FLOOR_PER_S * 1000) + 8000
        topics, data_dir = [*sidecar.topics, target], broker_data_dir()
        at_start = snapshot(bootstrap, topics, data_dir)
        produce_fast(
            bootstrap,
            sidecar.buffer,
            buffer_records(target, args.burst, iter(lambda: due, None), "burst-"),
        )
        sidecar.wait_scheduled(int(before) + args.burst, 120)
        if now_ms() > due:
            print("  !! burst not fully scheduled before its due time")
        scheduled = snapshot(bootstrap, topics, data_dir)
        gc_before, reads_before = gc_pauses.read(sidecar.url), sidecar.index_reads()
        rows = read_deliveries(bootstrap, target, args.burst, 300)
        gc_row = gc_pauses.read(sidecar.url).minus(gc_before).row()
        reads = reads_text(reads_before, sidecar.index_reads())
        time.sleep(1.0)  # the last step's markers and state records are in too
        drained = snapshot(bootstrap, topics, data_dir)
        results["writes"] = "\n".join(
            [
                scheduled.minus(at_start).per(args.burst, "scheduled record (ingest)"),
                drained.minus(scheduled).per(len(rows), "delivery (burst drain)"),
            ]
        )
        print("broker writes:\n" + results["writes"])
        drain_s = (rows[:, 1].max() - due) / 1000
        visible_s = (rows[:, 2].max() - due) / 1000
        early = int((rows[:, 1] < rows[:, 0]).sum())
        burst_rate = len(rows) / max(drain_s, 0.001)
        results["burst"] = (
            f"{len(rows)} due at one instant: last delivered {drain_s:.2f} s after due "
            f"({burst_rate:,.0f}/s), last visible {visible_s:.2f} s "
            f"({len(rows) / visible_s:,.0f}/s); {early} early; {reads}; GC pauses: {gc_row}; "
            f"{jit.text()}"
        )
        print("burst:", results["burst"])
        sidecar.stop()

        # Ingest and RSS: far-future schedules produced while the sidecar is stopped.
        target = create_topic(admin, f"bench-far-{uuid.uuid4().hex[:6]}")
        total = sidecar_total = 0
        rss_rows = [f"0 pending: {rss0:.0f} MB"]
        ingest_rates = []
        for level in args.pending:
            add = level - total
            produce_rate = produce_fast(
                bootstrap,
                sidecar.buffer,
                buffer_records(
                    target, add, (now_ms() + DAY_MS + i for i in range(add)), f"far{level}-"
                ),
            )
            ready_s = sidecar.start()
            reached, rate, seconds = sidecar.wait_scheduled(add, args.max_ingest_s)
            sidecar_total = total + reached
            pending = sidecar.metrics().get("kpd_schedules_pending", -1)
            rss = sidecar.rss_mb()
            time.sleep(SETTLE_S)  # what the ingest's buffers held is handed back (memory_trim)
            settled = sidecar.rss_mb()
            ingest_rates.append(rate)
            print(
                f"ingest of {add:,} (producer {produce_rate:,.0f}/s): {reached:,} in "
                f"{seconds:.1f} s = {rate:,.0f} schedules/s (ready after {ready_s:.1f} s); "
                f"pending {pending:,.0f}; RSS {rss:.0f} MB, {settled:.0f} MB {SETTLE_S:.0f} s later"
            )
            rss_rows.append(
                f"{pending:,.0f} pending: {rss:.0f} MB, {settled:.0f} MB {SETTLE_S:.0f} s later "
                f"(ingest {reached:,} at {rate:,.0f}/s in {seconds:.0f} s)"
            )
            sidecar.stop()
            total = sidecar_total
            if reached < add:
                print(f"  !! stopped at {sidecar_total:,} pending (time cap {args.max_ingest_s} s)")
                break
        # A cold start on the largest backlog: the RSS a restarted sidecar settles at.
        ready_s = sidecar.start()
        sidecar.wait_delivering(warm)
        rss = sidecar.rss_mb()
        rss_rows.append(f"restart with {total:,} pending: {rss:.0f} MB, ready in {ready_s:.1f} s")
        sidecar.stop()
        rss_rows.append(rebuild(bootstrap, sidecar, ready_s))
    finally:
        sidecar.stop()

    ingest = max(ingest_rates) if ingest_rates else 0.0
    print("\n== kpd delay service vs raw consume->produce loop (same broker) ==")
    print(f"raw loop, plain               {raw_plain:>10,.0f} records/s")
    print(f"raw loop, transactional       {raw_txn:>10,.0f} records/s")
    print(
        f"ingest                        {ingest:>10,.0f} schedules/s "
        f"({ingest / raw_txn:.2f} of txn raw, {ingest / raw_plain:.2f} of plain)"
    )
    print(
        f"burst drain                   {burst_rate:>10,.0f} deliveries/s "
        f"({burst_rate / raw_txn:.2f} of txn raw, {burst_rate / raw_plain:.2f} of plain)"
    )
    print(f"sustained dispatch            {results['dispatch']}")
    print(f"mixed load                    {results['mixed']}")
    print(f"short delays at a trickle     {results['trickle']}")
    print(f"burst                         {results['burst']}")
    print(f"broker writes\n{results['writes']}")
    for row in rss_rows:
        print(f"RSS                           {row}")


def broker_data_dir() -> Path | None:
    """The data folder of the bench's own local broker (`broker_for_tests`), if it runs one."""
    folder = ROOT / ".kpd" / "bench-kafka" / f"session-{os.getpid()}" / "data"
    return folder if folder.is_dir() and "KPD_BOOTSTRAP" not in os.environ else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raw-n", type=int, default=200_000)
    parser.add_argument("--rate", type=int, default=5000, help="due records per second")
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument(
        "--mixed-ingest", type=int, default=15_000, help="far-future schedules per second"
    )
    parser.add_argument("--burst", type=int, default=100_000)
    parser.add_argument(
        "--pending",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1_000_000, 5_000_000],
        help="cumulative far-future backlog sizes at which RSS is measured",
    )
    parser.add_argument("--max-ingest-s", type=float, default=600)
    broker_jit.add_argument(parser)
    parser.add_argument(
        "--shards", type=int, default=2, help="the sidecar's KPD_SHARDS (kpd's default is 8)"
    )
    args = parser.parse_args()
    with broker_for_tests(os.environ, ROOT / ".kpd" / "bench-kafka") as bootstrap:
        run(bootstrap, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
