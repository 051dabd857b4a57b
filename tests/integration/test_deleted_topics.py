"""A popped topic deleted while its messages wait in the group's retry topic: no pop can ask for
them any more, so they are dead-lettered with the reason (never dropped), whether the leader
sees the deletion while it runs or a new leader finds the topic gone; the group's other topics
flow on. Real broker, real `kpd run`, HTTP."""

from __future__ import annotations

import signal

from confluent_kafka import Producer
from kafka_helpers import TopicReader, header_dict, pop_until, produce_to_partition, wait_for

from kpd_client import KpdClient


def produce(bootstrap: str, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    produce_to_partition(producer, topic, 0, [(None, v.encode(), []) for v in values])


def requeue_all(kpd: KpdClient, group: str, topic: str, count: int) -> None:
    """Pop `count` messages of `topic` and nack them at once: their retry copies are due now."""
    popped = pop_until(kpd, group, topic, count, invisible_ms=600_000)
    assert len(popped) == count
    results = kpd.nack(group, [m.receipt for m in popped], 0)
    assert {r["status"] for r in results} == {"requeued"}


def expect_dead_letters(reader: TopicReader, topic: str, count: int, drive) -> None:
    """Wait until the DLQ holds `count` copies of `topic`'s messages (calling `drive` meanwhile:
    a pop wakes the shard's thread), then check each one's headers."""

    def arrived() -> bool:
        drive()
        reader.poll(0.2)
        return len(reader.messages) >= count

    wait_for(arrived, 30, f"{count} dead letters of the deleted topic")
    assert len(reader.messages) == count
    for message in reader.messages:
        headers = header_dict(message)
        assert headers["kpd-dlq-reason"] == f"its topic {topic!r} was deleted".encode()
        assert headers["kpd-origin-topic"] == topic.encode()
        assert headers["kpd-delivery-count"] == b"1"
    offsets = sorted(int(header_dict(m)["kpd-origin-offset"]) for m in reader.messages)
    assert offsets == list(range(count))


def test_a_running_leader_dead_letters_the_retries_of_a_deleted_topic(
    sidecar_factory, new_topic, kafka_bootstrap, admin
) -> None:
    sidecar = sidecar_factory("a", shards="1").start()
    doomed, kept = new_topic("doomed"), new_topic("kept")
    produce(kafka_bootstrap, doomed, ["d0", "d1", "d2"])
    with KpdClient(sidecar.url) as kpd:
        requeue_all(kpd, "g", doomed, 3)
        admin.delete_topics([doomed])[doomed].result(timeout=30)
        wait_for(lambda: doomed not in admin.list_topics(timeout=10).topics, 30, "deleted")
        produce(kafka_bootstrap, kept, [f"k{i}" for i in range(4)])
        got: list = []
        with TopicReader(kafka_bootstrap, sidecar.dlq_topic("g")) as reader:
            expect_dead_letters(
                reader, doomed, 3, lambda: got.extend(kpd.pop("g", kept, 10, 600_000, 0))
            )
        # The group's other topic flows on, and nothing of the deleted one comes.
        got += pop_until(kpd, "g", kept, 4 - len(got), invisible_ms=600_000)
        assert sorted(m.value for m in got) == [b"k0", b"k1", b"k2", b"k3"]


def test_a_new_leader_dead_letters_the_retries_of_a_topic_deleted_while_it_was_down(
    sidecar_factory, new_topic, kafka_bootstrap, admin
) -> None:
    sidecar = sidecar_factory("a", shards="1").start()
    doomed, kept = new_topic("doomed"), new_topic("kept")
    produce(kafka_bootstrap, doomed, ["d0", "d1"])
    produce(kafka_bootstrap, kept, ["k0"])
    with KpdClient(sidecar.url) as kpd:
        requeue_all(kpd, "g", doomed, 2)
        [leased] = pop_until(kpd, "g", kept, 1, invisible_ms=600_000)  # the group lives on
    assert sidecar.terminate(signal.SIGTERM) == 0
    admin.delete_topics([doomed])[doomed].result(timeout=30)
    wait_for(lambda: doomed not in admin.list_topics(timeout=10).topics, 30, "deleted")
    sidecar.start()
    with (
        KpdClient(sidecar.url) as kpd,
        TopicReader(kafka_bootstrap, sidecar.dlq_topic("g")) as reader,
    ):
        expect_dead_letters(reader, doomed, 2, lambda: kpd.pop("g", kept, 10, 600_000, 0))
        assert kpd.ack("g", [leased.receipt])[0]["status"] == "acked"  # its lease was kept
