"""Shards of one worker take turns at ingest (`delay_service.ingest_turns`): a shard that has read
buffer records while another ingests holds them for a later step. Held records are delivered
exactly once, and the buffer offsets a shard commits never pass records it has not ingested."""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition
from kafka_helpers import (
    TopicReader,
    assert_exactly_once,
    assert_never_early,
    buffer_record,
    make_producer,
    metric_total,
    metric_values,
    now_ms,
    produce_to_partition,
    wait_delivering,
)

# Waiting when the shards start: each has a backlog of many steps, and both read at once.
PER_PARTITION = 20_000


def test_shards_take_turns_and_held_records_are_delivered_once(
    sidecar_factory, new_topic, kafka_bootstrap
):
    sidecar = sidecar_factory("a").start()
    env = sidecar.env
    buffer, partitions = env["KPD_BUFFER_TOPIC"], int(env["KPD_SHARDS"])
    assert partitions >= 2  # one buffer partition per shard, read by that shard's leader
    target = new_topic("turns")
    with sidecar.client() as http:
        wait_delivering(http, new_topic("warm"))
    sidecar.stop()  # the backlogs build up while no shard reads
    due = now_ms() + 4000
    ids: dict[int, list[str]] = {}
    producer = make_producer(kafka_bootstrap)
    for partition in range(partitions):
        records = [
            buffer_record(target, value=f"{partition}-{i}".encode(), deliver_at=due)
            for i in range(PER_PARTITION)
        ]
        ids[partition] = produce_to_partition(producer, buffer, partition, records)
    sidecar.start()
    expected = {i for p in ids for i in ids[p]}
    assert len(expected) == partitions * PER_PARTITION

    with TopicReader(kafka_bootstrap, target) as reader:
        reader.read_until(lambda m: len(m) >= len(expected), 120, "every record")
        messages = reader.read_for(1.0)  # settle: nothing extra may follow
    assert_never_early(messages)
    assert_exactly_once(messages, expected)
    with sidecar.client() as http:
        waits = metric_total(metric_values(http), "kpd_delay_ingest_waits_total")
    assert waits is not None and waits > 0, "no shard ever waited for the ingest turn"

    # Every buffer record was ingested and committed: the delay leaders' committed offsets are
    # the partitions' ends (a held record's offset committed early would have been lost above;
    # one never committed would sit below the end here).
    consumer = Consumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": f"{env['KPD_STATE_TOPIC_PREFIX']}delay"}
    )
    try:
        tps = [TopicPartition(buffer, p) for p in range(partitions)]
        committed = {tp.partition: tp.offset for tp in consumer.committed(tps, timeout=30)}
        ends = {p: consumer.get_watermark_offsets(TopicPartition(buffer, p), timeout=30)[1]
                for p in range(partitions)}  # fmt: skip
    finally:
        consumer.close()
    assert committed == ends
