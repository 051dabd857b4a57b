"""The records `bench/delay.py` and `bench/scale.py` write and read: schedules on a buffer topic,
targets with the broker's append time, deliveries read back with their lateness, and the raw
consume->produce loop kpd is measured against. Its topics and clock (`create_topic`, `now_ms`)
serve the pop benches too."""

import itertools
import threading
import time
import uuid
from collections.abc import Iterator

import numpy as np
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from foundation.kafka_clients import consume_ready

VALUE = b"v" * 100
DAY_MS = 24 * 3600 * 1000


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
