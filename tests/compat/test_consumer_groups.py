"""Kafka's own `kafka-consumer-groups --describe` shows a pop group's committed offsets and lag."""

from __future__ import annotations

from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from kafka_helpers import describe_group, unique, wait_for

from kpd_client import KpdClient

PRODUCED = {0: 5, 1: 3}  # records per partition
ACKED = {0: 3, 1: 3}  # the first n offsets of each partition are acked


def test_describe_shows_pop_group_offsets_and_lag(
    sidecar_factory, new_topic, kafka_bootstrap, admin, release, java
) -> None:
    sidecar = sidecar_factory("a").start()
    topic, group = new_topic(partitions=2), unique("g")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for partition, count in PRODUCED.items():
        for i in range(count):
            producer.produce(topic, f"p{partition}-{i}".encode(), partition=partition)
    assert producer.flush(30) == 0

    with KpdClient(sidecar.url) as kpd:
        popped: list = []
        wait_for(
            lambda: (
                popped.extend(kpd.pop(group, topic, max_messages=10, wait_ms=1000))
                or len(popped) == sum(PRODUCED.values())
            ),
            60,
            "every record popped",
        )
        to_ack = [m.receipt for m in popped if m.offset < ACKED[m.partition]]
        assert {r["status"] for r in kpd.ack(group, to_ack)} == {"acked"}

    def committed() -> dict[int, int]:
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in PRODUCED])
        answer = admin.list_consumer_group_offsets([request])[group].result(timeout=30)
        return {tp.partition: tp.offset for tp in answer.topic_partitions}

    wait_for(lambda: committed() == ACKED, 30, f"committed offsets {ACKED}")
    rows = {
        int(row["PARTITION"]): row
        for row in describe_group(java, release, kafka_bootstrap, group)
        if row["TOPIC"] == topic
    }
    assert sorted(rows) == sorted(PRODUCED)
    for partition, row in rows.items():
        assert row["GROUP"] == group
        assert int(row["CURRENT-OFFSET"]) == ACKED[partition]
        assert int(row["LOG-END-OFFSET"]) == PRODUCED[partition]
        assert int(row["LAG"]) == PRODUCED[partition] - ACKED[partition]
