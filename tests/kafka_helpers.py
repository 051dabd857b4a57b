"""Helpers for tests that talk to Kafka directly: produce buffer records, read targets exactly.

Reads never sleep: they consume until a count is reached (or a condition holds) with a deadline,
then optionally keep reading for a short settle window to prove nothing extra arrives.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import httpx
import orjson
import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
)
from confluent_kafka import TopicPartition as TP
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families

from devtools.broker_for_tests import broker_settings_from_env, free_port
from devtools.kafka_release import CONFIG_COMMAND
from kpd_client import KpdClient

Headers = list[tuple[str, bytes]]


# In every name `unique` makes during this test session (topics, namespaces, groups), so the
# session can prove at its end that it left no topic behind, even on a shared cluster.
SESSION_TAG = f"s{uuid.uuid4().hex[:6]}"


def unique(prefix: str) -> str:
    return f"{prefix}-{SESSION_TAG}-{uuid.uuid4().hex[:8]}"


def wait_for(
    condition: Callable[[], object], timeout_s: float = 30.0, what: str = "", fail: bool = True
) -> object:
    """Poll `condition` until it returns something truthy; after `timeout_s` fail the test (or,
    with `fail=False`, return the last falsy result so the caller can say more)."""
    deadline, pause = time.monotonic() + timeout_s, 0.02
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            if not fail:
                return result
            pytest.fail(f"timed out after {timeout_s} s waiting for {what or condition}")
        time.sleep(pause)
        pause = min(pause * 1.5, 0.1)  # a look often costs a sidecar a request: fewer when long


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def topic_ready(admin: AdminClient, name: str, partitions: int) -> bool:
    """The topic is in the metadata with a leader for each partition (not just created)."""
    metadata = admin.list_topics(name, timeout=10).topics.get(name)
    if metadata is None or metadata.error is not None:
        return False
    leaders = [p.leader for p in metadata.partitions.values() if p.error is None]
    return len(leaders) == partitions and min(leaders) >= 0


def make_producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})


def produce_one(
    producer: Producer,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: Headers,
    **kwargs: Any,
) -> None:
    """Produce one record, waiting for room while the producer's local queue is full."""
    while True:
        try:
            producer.produce(topic, value=value, key=key, headers=headers, **kwargs)
            return
        except BufferError:
            producer.poll(0.05)


def produce_all(
    producer: Producer,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes | None, Headers]],
    timestamp_ms: int | None = None,
    partition: int | None = None,
) -> list[Message]:
    """Produce (key, value, headers) records in order and wait until all are acknowledged; the
    records as the broker placed them, in the order acknowledged."""
    errors: list[str] = []
    placed: list[Message] = []

    def on_delivery(error: Any, message: Message) -> None:
        if error is not None:
            errors.append(str(error))
        else:
            placed.append(message)

    kwargs: dict[str, Any] = {"on_delivery": on_delivery}
    if timestamp_ms is not None:
        kwargs["timestamp"] = timestamp_ms
    if partition is not None:
        kwargs["partition"] = partition
    for key, value, headers in records:
        produce_one(producer, topic, key, value, headers, **kwargs)
        producer.poll(0)
    remaining = producer.flush(30)
    assert remaining == 0, f"{remaining} records not acknowledged"
    assert not errors, errors
    return placed


def produce_spread(producer: Producer, topic: str, partitions: int, name: str) -> list[bytes]:
    """10 messages on each of the topic's `partitions`, named `<name>-<partition>-<i>` (unkeyed
    ones sent at once can all land on one partition); their values."""
    values = []
    for partition in range(partitions):
        batch = [f"{name}-{partition}-{i}".encode() for i in range(10)]
        produce_all(producer, topic, [(None, v, []) for v in batch], partition=partition)
        values += batch
    return values


def pop_all(kpd: KpdClient, group: str, topic: str, count: int, timeout_s: float = 30) -> list:
    """Pop until `count` messages came (or the test fails): each stays leased for a minute."""
    popped: list = []
    more = lambda: popped.extend(kpd.pop(group, topic, 100, 60_000)) or len(popped) >= count  # noqa: E731
    wait_for(more, timeout_s, f"{count} messages popped by group {group}")
    return popped


def pop_until(kpd: KpdClient, group: str, topic: str, count: int, **kw: Any) -> list:
    """Pop at most `count` messages in all, for up to 30 s (`kw`: the pop's other fields)."""
    got: list = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        got += kpd.pop(group, topic, max_messages=count - len(got), wait_ms=2000, **kw)
    return got


def produce_to_partition(
    producer: Producer,
    topic: str,
    partition: int,
    records: Sequence[tuple[bytes | None, bytes | None, Headers]],
) -> list[str]:
    """Produce (key, value, headers) records to one partition, in order; the default ids kpd
    gives records without a `kpd-id` (they name the record's place)."""
    placed = produce_all(producer, topic, records, partition=partition)
    assert len(placed) == len(records)
    return [f"kpd:{m.partition()}-{m.offset()}-{m.timestamp()[1]}" for m in placed]


def buffer_record(
    target: str,
    *,
    value: bytes | None,
    key: bytes | None = None,
    deliver_at: int | None = None,
    delay_ms: int | None = None,
    schedule_id: str | None = None,
    headers: Headers | None = None,
) -> tuple[bytes | None, bytes | None, Headers]:
    control: Headers = [("kpd-target", target.encode())]
    if deliver_at is not None:
        control.append(("kpd-deliver-at", str(deliver_at).encode()))
    if delay_ms is not None:
        control.append(("kpd-delay-ms", str(delay_ms).encode()))
    if schedule_id is not None:
        control.append(("kpd-id", schedule_id.encode()))
    return key, value, [*(headers or []), *control]


class TopicReader:
    """Reads every partition of a topic from the beginning, keeping everything it has seen."""

    def __init__(self, bootstrap: str, topic: str, isolation: str = "read_committed") -> None:
        self.topic = topic
        self.messages: list[Message] = []
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"kpd-test-reader-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "isolation.level": isolation,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 20,
            }
        )
        metadata = self._consumer.list_topics(topic, timeout=10)
        partitions = sorted(metadata.topics[topic].partitions)
        self._consumer.assign([TP(topic, p, OFFSET_BEGINNING) for p in partitions])

    def poll(self, timeout_s: float = 0.1) -> list[Message]:
        batch = self._consumer.consume(num_messages=5000, timeout=timeout_s)
        fresh = []
        for message in batch:
            if message.error() is not None:
                if message.error().fatal():
                    raise KafkaException(message.error())
                continue
            fresh.append(message)
        self.messages.extend(fresh)
        return fresh

    def read_until(
        self, done: Callable[[list[Message]], bool], timeout_s: float, what: str
    ) -> list[Message]:
        deadline = time.monotonic() + timeout_s
        while not done(self.messages):
            if time.monotonic() > deadline:
                pytest.fail(
                    f"timed out after {timeout_s} s waiting for {what} on {self.topic}; "
                    f"read {len(self.messages)} records"
                )
            self.poll()
        return self.messages

    def read_count(self, count: int, timeout_s: float) -> list[Message]:
        return self.read_until(lambda m: len(m) >= count, timeout_s, f"{count} records")

    def read_for(self, seconds: float) -> list[Message]:
        """Keep reading for `seconds` (a settle window: proves nothing more arrives)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.poll(min(0.1, max(deadline - time.monotonic(), 0.001)))
        return self.messages

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> TopicReader:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def header_dict(message: Message) -> dict[str, bytes]:
    return {name: value for name, value in (message.headers() or [])}


def kpd_id(message: Message) -> str:
    return header_dict(message)["kpd-id"].decode()


def delivered_ids(messages: Sequence[Message]) -> list[str]:
    return [kpd_id(m) for m in messages]


def assert_never_early(messages: Sequence[Message]) -> None:
    """Every delivered record's broker timestamp is at or after its kpd-deliver-at."""
    early = []
    for message in messages:
        due = int(header_dict(message)["kpd-deliver-at"])
        _, timestamp = message.timestamp()
        if timestamp < due:
            early.append((kpd_id(message), due, timestamp))
    assert not early, f"{len(early)} delivered early (id, due, timestamp): {early[:10]}"


def assert_exactly_once(messages: Sequence[Message], expected_ids: set[str]) -> None:
    ids = delivered_ids(messages)
    duplicates = sorted(i for i, n in Counter(ids).items() if n > 1)
    assert not duplicates, f"{len(ids) - len(set(ids))} duplicate deliveries: {duplicates[:10]}"
    missing = expected_ids - set(ids)
    extra = set(ids) - expected_ids
    assert not missing, f"{len(missing)} never delivered: {sorted(missing)[:10]}"
    assert not extra, f"{len(extra)} unexpected deliveries: {sorted(extra)[:10]}"
    assert len(ids) == len(expected_ids)


def log_events(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [orjson.loads(m.value()) for m in messages]


def metric_values(http: httpx.Client) -> dict[str, float]:
    """`/metrics` as {sample name (with sorted labels): value}."""
    response = http.get("/metrics")
    assert response.status_code == 200
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            values[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return values


def metric_total(values: dict[str, float], name: str) -> float | None:
    """The sum of a family's samples over all their labels (e.g. a per-shard gauge over the
    shards led here); None when the sidecar exposes no sample of it."""
    samples = [v for key, v in values.items() if key == name or key.startswith(name + "{")]
    return sum(samples) if samples else None


def leader_restarts(http: httpx.Client) -> float:
    """How often the sidecar's shard roles were rebuilt from Kafka (every role and reason)."""
    return metric_total(metric_values(http), "kpd_leader_restarts_total") or 0.0


def wait_delivering(http: httpx.Client, target: str, timeout_s: float = 30) -> None:
    """Schedule one record due now over HTTP and wait until it shows `delivered`: the leader loop
    is then running (readiness only says a leader is known)."""
    schedule_id = f"warm-up-{uuid.uuid4().hex[:8]}"
    response = http.post(
        f"/v1/topics/{target}/messages",
        json={"messages": [{"value": "warm-up", "delay_ms": 0, "id": schedule_id}]},
    )
    assert response.status_code == 200, response.text
    # A 200 holds per-item results: an `unknown_topic` error here (a target not yet in the
    # sidecar's metadata) must fail now, not as a delivery timeout later.
    [item] = response.json()["results"]
    assert item["status"] == "scheduled", f"warm-up record not scheduled: {item}"
    deadline = time.monotonic() + timeout_s
    while http.get(f"/v1/schedules/{schedule_id}").json().get("state") != "delivered":
        if time.monotonic() > deadline:
            pytest.fail(f"leader did not deliver a due-now record within {timeout_s} s")
        time.sleep(0.02)


def led_shards(sidecar) -> set[int]:
    """The shards a sidecar says it leads."""
    return _shards_flagged(sidecar, "kpd_shard_leader")


def standby_shards(sidecar) -> set[int]:
    """The shards whose pop state a sidecar says it follows as their standby."""
    return _shards_flagged(sidecar, "kpd_shard_standby")


def _shards_flagged(sidecar, metric: str) -> set[int]:
    with sidecar.client() as http:
        values = metric_values(http)
    prefix = metric + "{shard="
    return {int(k[len(prefix) : -1]) for k, v in values.items() if k.startswith(prefix) and v == 1}


@contextmanager
def fetch_quota(bootstrap: str, client_id: str, bytes_per_s: int) -> Iterator[None]:
    """Kafka's own client quota on `client_id` while the block runs (`kafka-configs --alter
    --entity-type clients`): the broker throttles its fetches to `bytes_per_s`, so a test can
    make one sidecar's reading last long enough to act on it mid-way."""
    java = shutil.which("java")
    assert java, "Java 17+ runs Kafka's ConfigCommand"
    release = broker_settings_from_env(os.environ)[0]

    def configs(*change: str) -> None:
        result = subprocess.run(
            [java, "-cp", release.classpath(), CONFIG_COMMAND,
             "--bootstrap-server", bootstrap, "--alter", *change,
             "--entity-type", "clients", "--entity-name", client_id],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr[-3000:]

    configs("--add-config", f"consumer_byte_rate={bytes_per_s}")
    try:
        yield
    finally:
        configs("--delete-config", "consumer_byte_rate")


DELETE_TIMEOUT_S = 60


class TopicCleanup:
    """Topics (exact names) and namespaces (name prefixes) to delete when a test ends."""

    def __init__(self, admin: AdminClient) -> None:
        self._admin = admin
        self.names: set[str] = set()
        self.prefixes: set[str] = set()

    def owned(self) -> set[str]:
        return {
            topic
            for topic in self._admin.list_topics(timeout=30).topics
            if topic in self.names or topic.startswith(tuple(self.prefixes))
        }

    def delete_all(self) -> None:
        doomed = self.owned()
        if doomed:
            for future in self._admin.delete_topics(sorted(doomed)).values():
                try:
                    future.result(timeout=DELETE_TIMEOUT_S)
                except KafkaException as error:
                    if error.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                        raise
        wait_for(lambda: not self.owned(), DELETE_TIMEOUT_S, f"deletion of {sorted(doomed)}")


def two_free_ports() -> int:
    """A free port whose next one is free too."""
    while True:
        base = free_port()
        try:
            with socket.create_server(("127.0.0.1", base + 1)):
                return base
        except OSError:
            continue


def describe_group(java: str, release: Any, bootstrap: str, group: str) -> list[dict[str, str]]:
    """Kafka's own `kafka-consumer-groups --describe` of `group` (`release`: a KafkaRelease):
    one row per partition, by column name."""
    classpath, main = release.consumer_group_command()
    result = subprocess.run(
        [java, "-cp", classpath, main, "--bootstrap-server", bootstrap, "--describe",
         "--group", group],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    lines = [line.split() for line in result.stdout.splitlines() if line.strip()]
    header = next(i for i, words in enumerate(lines) if words[:2] == ["GROUP", "TOPIC"])
    return [dict(zip(lines[header], words, strict=True)) for words in lines[header + 1 :]]
