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
    led_shards,
    make_producer,
    metric_total,
    metric_values,
    now_ms,
    produce_to_partition,
    wait_delivering,
    wait_for,
)

# Both shards' leaders run while the backlogs arrive in alternating chunks, so both read records at
# once (each chunk is a few steps of ingest). Backlogs built while the sidecar was stopped left the
# overlap to when each shard's leader happened to start: in 2 CI runs one shard had drained its
# backlog before the other started, and no shard waited.
PER_PARTITION = 20_000
CHUNK = 1_000


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
    wait_for(lambda: led_shards(sidecar) == set(range(partitions)), 60, "every shard led")
    due = now_ms() + 8000
    ids: dict[int, list[str]] = {partition: [] for partition in range(partitions)}
    producer = make_producer(kafka_bootstrap)
    for start in range(0, PER_PARTITION, CHUNK):
        for partition in range(partitions):
            records = [
                buffer_record(target, value=f"{partition}-{i}".encode(), deliver_at=due)
                for i in range(start, start + CHUNK)
            ]
            ids[partition] += produce_to_partition(producer, buffer, partition, records)
    expected = {i for p in ids for i in ids[p]}
    assert len(expected) == partitions * PER_PARTITION

    with TopicReader(kafka_bootstrap, target) as reader:
        reader.read_until(lambda m: len(m) >= len(expected), 120, "every record")
        messages = reader.read_for(1.0)  # settle: nothing extra may follow
    assert_never_early(messages)
    assert_exactly_once(messages, expected)
    with sidecar.client() as http:
        waits = metric_total(metric_values(http), "kpd_delay_ingest_waits_total")
    print(f"\ningest turns waited for: {waits}")
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
