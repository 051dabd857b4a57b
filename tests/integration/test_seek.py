"""Seek and purge over real HTTP against real Kafka: a group's position in a topic moves, every
delivery made before it is over, and its retries are dropped wherever they wait."""

from __future__ import annotations

import shutil
import threading
import time
from typing import Any, cast

from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka_helpers import TopicReader, describe_group, led_shards, pop_until, unique, wait_for
from test_cli import DONE, expect, lines
from test_cli import kpd as kpd_cli

from devtools.kafka_release import DEFAULT_VERSION, KafkaRelease
from kpd_client import KpdClient

T0 = 1_700_000_000_000  # the produced records' timestamps start here
# Records that old fall out of a topic's default retention at the broker's next check.
KEPT = {"retention.ms": "-1"}


def produce(bootstrap: str, topic: str, records: dict[int, list[tuple[str, int]]]) -> None:
    """(value, timestamp) records, per partition, in order."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition, values in records.items():
        for value, timestamp in values:
            producer.produce(topic, value.encode(), value.encode(), partition, timestamp=timestamp)
    assert producer.flush(30) == 0


def statuses(results: list[dict[str, Any]]) -> list[str]:
    return [result["status"] for result in results]


def committed(admin: AdminClient, group: str, topic: str, partitions: int) -> dict[int, int]:
    asked = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(partitions)]
    )

    def stable() -> dict[int, int] | None:
        # A seek's offsets commit in its transaction: until its markers are written, the broker
        # answers a partition with UNSTABLE_OFFSET_COMMIT and no offset.
        answer = admin.list_consumer_group_offsets([asked], require_stable=True)[group].result(
            timeout=30
        )
        if any(tp.error is not None for tp in answer.topic_partitions):
            return None
        return {tp.partition: tp.offset for tp in answer.topic_partitions}

    return cast(dict[int, int], wait_for(stable, 30, f"{group}'s stable offsets in {topic}"))


def test_a_purge_ends_every_delivery_and_drops_every_retry_wherever_it_waits(
    sidecar_factory, new_topic, kafka_bootstrap, admin
) -> None:
    sidecar = sidecar_factory("a").start()
    group, topic = unique("g"), new_topic(partitions=2, config=KEPT)
    produce(kafka_bootstrap, topic, {0: [("a0", T0), ("a1", T0), ("a2", T0)], 1: [("b0", T0)]})
    with KpdClient(sidecar.url) as kpd:
        popped = {m.value: m for m in pop_until(kpd, group, topic, 4)}
        assert sorted(popped) == [b"a0", b"a1", b"a2", b"b0"]
        # At once: with the group's first backoff (10 s) these would be due with a1's below.
        nacks = kpd.nack(group, [popped[b"a0"].receipt, popped[b"b0"].receipt], delay_ms=0)
        assert statuses(nacks) == ["requeued"] * 2
        # A later retry waits in the delay service meanwhile.
        assert statuses(kpd.nack(group, [popped[b"a1"].receipt], delay_ms=10_000)) == ["requeued"]
        retried = pop_until(kpd, group, topic, 2)  # the retry copies of a0 and b0: leased again
        assert sorted((m.value, m.delivery_count) for m in retried) == [(b"a0", 2), (b"b0", 2)]

        positions = kpd.seek(group, topic, to="latest")
        assert positions == [{"partition": 0, "offset": 3}, {"partition": 1, "offset": 1}]
        # Every receipt handed out before the seek is over: the originals' and the retries'.
        before = [popped[b"a2"].receipt, *(m.receipt for m in retried)]
        assert statuses(kpd.ack(group, before)) == ["superseded"] * 3
        assert committed(admin, group, topic, 2) == {0: 3, 1: 1}
        # The delayed retry comes to the retry topic in its time, after the seek ...
        with TopicReader(kafka_bootstrap, sidecar.retry_topic(group)) as reader:
            copies = reader.read_count(3, 30)
            ends = {m.partition(): m.offset() + 1 for m in copies}
        # ... and the group reads past it and every other copy made before, handing none out.
        retry_topic = sidecar.retry_topic(group)
        wait_for(
            lambda: kpd.pop(group, topic, wait_ms=0) == []
            and all(committed(admin, group, retry_topic, max(ends) + 1).get(p, -1) >= end
                    for p, end in ends.items()),
            30, "the group past the copies made before the seek",
        )  # fmt: skip
        produce(kafka_bootstrap, topic, {0: [("a3", T0)], 1: [("b1", T0)]})
        after = pop_until(kpd, group, topic, 2)
        assert sorted((m.value, m.delivery_count) for m in after) == [(b"a3", 1), (b"b1", 1)]
        assert statuses(kpd.ack(group, [m.receipt for m in after])) == ["acked"] * 2
        assert kpd.pop(group, topic, wait_ms=500) == []


def test_a_seek_by_time_or_to_the_start_delivers_again_from_there(
    sidecar_factory, new_topic, kafka_bootstrap
) -> None:
    sidecar = sidecar_factory("a").start()
    group, topic = unique("g"), new_topic(partitions=2, config=KEPT)
    records = {
        0: [("x0", T0), ("x1", T0 + 1_000), ("x2", T0 + 2_000)],
        1: [("y0", T0 + 500), ("y1", T0 + 1_500)],
    }
    produce(kafka_bootstrap, topic, records)
    with KpdClient(sidecar.url) as kpd:
        first = pop_until(kpd, group, topic, 5)
        assert statuses(kpd.ack(group, [m.receipt for m in first])) == ["acked"] * 5
        at = kpd.seek(group, topic, time_ms=T0 + 1_000)
        assert at == [{"partition": 0, "offset": 1}, {"partition": 1, "offset": 1}]
        again = pop_until(kpd, group, topic, 3)
        assert sorted((m.value, m.delivery_count) for m in again) == [
            (b"x1", 1), (b"x2", 1), (b"y1", 1),
        ]  # fmt: skip
        assert statuses(kpd.ack(group, [m.receipt for m in again])) == ["acked"] * 3
        url = ("--url", sidecar.url)
        sought = expect(kpd_cli("seek", group, topic, "--to", "earliest", *url), DONE)
        assert lines(sought) == [{"partition": 0, "offset": 0}, {"partition": 1, "offset": 0}]
        everything = pop_until(kpd, group, topic, 5)
        assert sorted(m.value for m in everything) == [b"x0", b"x1", b"x2", b"y0", b"y1"]
        # A time after every record: each partition's end, nothing left to hand out.
        assert kpd.seek(group, topic, time_ms=T0 + 10**6) == [
            {"partition": 0, "offset": 3}, {"partition": 1, "offset": 2},
        ]  # fmt: skip
        assert statuses(kpd.ack(group, [everything[0].receipt])) == ["superseded"]
        assert kpd.pop(group, topic, wait_ms=500) == []
    java = shutil.which("java")
    assert java is not None
    rows = describe_group(java, KafkaRelease(DEFAULT_VERSION), kafka_bootstrap, group)
    offsets = {int(row["PARTITION"]): int(row["CURRENT-OFFSET"]) for row in rows}
    assert offsets == {0: 3, 1: 2}  # Kafka's own tooling shows where the group stands


def test_a_seek_racing_pops_and_acks_hands_out_nothing_from_before_it(
    sidecar_factory, new_topic, kafka_bootstrap
) -> None:
    sidecar = sidecar_factory("a").start()
    group, topic = unique("g"), new_topic(partitions=4, config=KEPT)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5})
    popped: list[Any] = []
    failures: list[BaseException] = []

    def produce_until(stop: threading.Event) -> None:
        n = 0
        while not stop.is_set():
            producer.produce(topic, f"old-{n}".encode(), f"k{n}".encode())
            producer.poll(0)
            n += 1
            time.sleep(0.002)

    def work(stop: threading.Event) -> None:
        try:
            with KpdClient(sidecar.url) as kpd:
                while not stop.is_set():
                    batch = kpd.pop(group, topic, max_messages=20, wait_ms=200)
                    popped.extend(batch)
                    if batch:
                        kpd.ack(group, [m.receipt for m in batch])
        except BaseException as error:
            failures.append(error)

    def running(target: Any, count: int) -> tuple[threading.Event, list[threading.Thread]]:
        stop = threading.Event()
        threads = [threading.Thread(target=target, args=(stop,)) for _ in range(count)]
        for thread in threads:
            thread.start()
        return stop, threads

    def ended(stop: threading.Event, threads: list[threading.Thread]) -> None:
        stop.set()
        for thread in threads:
            thread.join()

    with KpdClient(sidecar.url) as kpd:
        feeding, workers = running(produce_until, 1), running(work, 3)
        try:
            wait_for(lambda: len(popped) > 100, 30, "the workers popping")
            for _ in range(3):  # seeks while records arrive and pops and acks go on
                kpd.seek(group, topic, to="latest")
        finally:
            ended(*feeding)
            ended(*workers)
        assert failures == []
        # What the feeder left in the producer's queue reaches the broker before the next seek:
        # anything later is rightly popped.
        assert producer.flush(30) == 0
        # A backlog buffered in the lanes, some of it leased: all of it before the next seek.
        produce(
            kafka_bootstrap,
            topic,
            {p: [(f"late-{p}-{n}", T0) for n in range(20)] for p in range(4)},
        )
        leased = pop_until(kpd, group, topic, 5)
        positions = {p["partition"]: p["offset"] for p in kpd.seek(group, topic, to="latest")}
        assert statuses(kpd.ack(group, [m.receipt for m in leased])) == ["superseded"] * 5
        popped.clear()
        workers = running(work, 3)
        try:
            markers = [f"new-{n}" for n in range(40)]
            for value in markers:
                producer.produce(topic, value.encode(), value.encode())
            assert producer.flush(30) == 0
            wait_for(lambda: len(popped) >= len(markers), 30, "the markers popped")
        finally:
            ended(*workers)
    assert failures == []
    assert sorted(m.value.decode() for m in popped) == sorted(markers)  # each once, and no other
    assert all(m.offset >= positions[m.partition] for m in popped)


def test_a_seek_taken_by_one_sidecar_moves_the_shards_the_other_leads(
    sidecar_factory, new_topic, kafka_bootstrap
) -> None:
    a = sidecar_factory("a", workers="1").start()
    b = sidecar_factory("b", workers="1").start()
    wait_for(lambda: led_shards(a) and led_shards(b), 60, "both sidecars leading a shard")
    group, topic = unique("g"), new_topic(partitions=4, config=KEPT)
    produce(kafka_bootstrap, topic, {p: [(f"m{p}-{n}", T0) for n in range(3)] for p in range(4)})
    with KpdClient(a.url) as on_a, KpdClient(b.url) as on_b:
        leased = pop_until(on_a, group, topic, 12)
        assert len(leased) == 12
        requeued = on_a.nack(group, [m.receipt for m in leased if m.offset == 0], delay_ms=0)
        assert statuses(requeued) == ["requeued"] * 4
        retried = pop_until(on_a, group, topic, 4)  # the copies, in the retry lanes of both
        assert sorted(m.delivery_count for m in retried) == [2] * 4
        positions = on_b.seek(group, topic, to="earliest")
        assert positions == [{"partition": p, "offset": 0} for p in range(4)]
        before = [m.receipt for m in [*leased, *retried] if m.offset != 0 or m.delivery_count > 1]
        assert statuses(on_a.ack(group, before)) == ["superseded"] * len(before)
        again = pop_until(on_b, group, topic, 12)
        assert sorted((m.value, m.delivery_count) for m in again) == sorted(
            (f"m{p}-{n}".encode(), 1) for p in range(4) for n in range(3)
        )  # each once, as a first delivery: the retry copies of the first deliveries are gone
        assert statuses(on_b.ack(group, [m.receipt for m in again])) == ["acked"] * 12
        assert on_a.pop(group, topic, wait_ms=1_000) == []


def test_seeks_that_cannot_be_are_refused_with_nothing_moved(
    sidecar_factory, new_topic, kafka_bootstrap, admin
) -> None:
    sidecar = sidecar_factory("a").start()
    group, topic = unique("g"), new_topic(config=KEPT)
    produce(kafka_bootstrap, topic, {0: [("m", T0)]})
    path = f"/v1/groups/{group}/topics/{topic}/seek"
    bodies: list[Any] = [
        {},
        {"to": "earliest", "time_ms": 1},
        {"to": "middle"},
        {"to": None},
        {"time_ms": -1},
        {"time_ms": 10**15},
        {"time_ms": True},
        {"to": "latest", "and": 1},
        ["to", "latest"],
    ]
    with sidecar.client() as http:
        for body in bodies:
            answer = http.post(path, json=body)
            assert (answer.status_code, answer.json()["code"]) == (422, "invalid_request"), body
        missing = http.post(
            f"/v1/groups/{group}/topics/{unique('none')}/seek", json={"to": "latest"}
        )
        assert (missing.status_code, missing.json()["code"]) == (404, "topic_not_found")
        retry_topic = sidecar.retry_topic(group)
        own = http.post(f"/v1/groups/{group}/topics/{retry_topic}/seek", json={"to": "latest"})
        assert (own.status_code, own.json()["code"]) == (403, "kpd_topic")
        forged = http.post(path, json={"to": "latest"}, headers={"x-kpd-forwarded": "x"})
        assert (forged.status_code, forged.json()["code"]) == (400, "bad_request")
    assert committed(admin, group, topic, 1) == {0: -1001}  # nothing was committed
    with KpdClient(sidecar.url) as kpd:
        [message] = pop_until(kpd, group, topic, 1)
        assert message.value == b"m"
