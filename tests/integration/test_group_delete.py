"""`DELETE /v1/groups/{group}` over real HTTP against real Kafka: a group forgotten on every
shard, its offsets gone from Kafka, its topics deleted when asked; other groups untouched."""

from __future__ import annotations

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka_helpers import led_shards, pop_until, unique, wait_for
from test_cli import DONE, FAILED, expect, lines
from test_cli import kpd as kpd_cli

from kpd_client import KpdClient

VALUES = [f"m{n}" for n in range(8)]


def produce(bootstrap: str, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for n, value in enumerate(values):
        producer.produce(topic, value.encode(), value.encode(), n % 4)
    assert producer.flush(30) == 0


def statuses(results: list[dict]) -> list[str]:
    return [result["status"] for result in results]


def offsets(admin: AdminClient, group: str, topic: str, partitions: int) -> dict[int, int]:
    asked = [TopicPartition(topic, p) for p in range(partitions)]
    answer = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, asked)])
    return {tp.partition: tp.offset for tp in answer[group].result(timeout=30).topic_partitions}


def test_a_deleted_group_starts_afresh_without_its_leases_positions_or_retries(
    sidecar_factory, new_topic, kafka_bootstrap, admin
) -> None:
    a = sidecar_factory("a", workers="1").start()
    b = sidecar_factory("b", workers="1").start()
    wait_for(lambda: led_shards(a) and led_shards(b), 60, "both sidecars leading a shard")
    group, other, topic = unique("g"), unique("other"), new_topic(partitions=4)
    produce(kafka_bootstrap, topic, VALUES)
    with KpdClient(a.url) as on_a, KpdClient(b.url) as on_b:
        first = pop_until(on_a, group, topic, 8)
        assert statuses(on_a.ack(group, [m.receipt for m in first[:4]])) == ["acked"] * 4
        # No backoff: the retry copy is in the retry topic once the nack answers (after the
        # group's 10 s backoff it could reach it after the delete, and be popped again).
        nacked = on_a.nack(group, [first[4].receipt], delay_ms=0)
        assert statuses(nacked) == ["requeued"]
        wait_for(
            lambda: sorted(offsets(admin, group, topic, 4).values()) != [-1001] * 4,
            30, "the group's offsets committed",
        )  # fmt: skip
        assert len(pop_until(on_a, other, topic, 8)) == 8  # another group of the same topic
        # Through b: every shard forgets, a's by a forwarded call.
        deleted = expect(kpd_cli("groups", "delete", group, "--url", b.url), DONE)
        assert lines(deleted) == [{"group": group, "deleted_topics": []}]
        assert offsets(admin, group, topic, 4) == {p: -1001 for p in range(4)}
        assert statuses(on_a.ack(group, [m.receipt for m in first[5:]])) == ["invalid"] * 3
        # A pop under its name starts where a new group does; the retry in the retry topic
        # stays behind (its offsets were set to the topic's end).
        again = pop_until(on_b, group, topic, 8)
        assert sorted((m.value.decode(), m.delivery_count) for m in again) == [
            (value, 1) for value in VALUES
        ]
        assert statuses(on_b.ack(group, [m.receipt for m in again])) == ["acked"] * 8
        assert on_b.pop(group, topic, wait_ms=1_000) == []
        # The other group's leases and offsets are its own.
        assert on_a.group(other)["topics"][topic]["in_flight"] == 8


def test_a_delete_with_topics_removes_them_and_refuses_what_it_cannot(
    sidecar_factory, new_topic, kafka_bootstrap, admin
) -> None:
    sidecar = sidecar_factory("a").start()
    group, topic = unique("g"), new_topic(partitions=4)
    retry, dlq = sidecar.retry_topic(group), sidecar.dlq_topic(group)
    produce(kafka_bootstrap, topic, VALUES[:2])
    with KpdClient(sidecar.url) as kpd:
        missing = expect(kpd_cli("groups", "delete", group, "--url", sidecar.url), FAILED)
        assert "group_not_found" in missing.stderr  # it never popped
        [one, two] = pop_until(kpd, group, topic, 2)
        assert statuses(kpd.reject(group, [one.receipt])) == ["dead_lettered"]
        # Consumers of the group other than kpd's: refused, and nothing is deleted.
        member = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
        member.subscribe([topic])
        try:
            wait_for(lambda: member.poll(0.2) is None and member.assignment(), 30, "a member")
            with sidecar.client() as http:
                refused = http.delete(f"/v1/groups/{group}", params={"topics": "true"})
            assert (refused.status_code, refused.json()["code"]) == (409, "group_in_use")
        finally:
            member.close()
        assert {retry, dlq} <= set(admin.list_topics(timeout=30).topics)
        assert sorted(kpd.delete_group(group, topics=True)) == sorted([retry, dlq])
        wait_for(
            lambda: not {retry, dlq} & set(admin.list_topics(timeout=30).topics),
            30, "the retry and DLQ topics gone",
        )  # fmt: skip
        assert statuses(kpd.ack(group, [two.receipt])) == ["invalid"]
        again = pop_until(kpd, group, topic, 2)  # its topics are made again for the new group
        assert sorted(m.value for m in again) == [b"m0", b"m1"]
        assert kpd.group(group)["dead_lettered"] == 0
