"""A buffer record without a `kpd-id`: the id kpd gives it names its buffer place and belongs to
the shard that read it, so it is never re-keyed through another shard's inbox; a cancel by that
id, produced to any buffer partition, still meets it."""

from __future__ import annotations

from kafka_helpers import (
    TopicReader,
    assert_never_early,
    buffer_record,
    delivered_ids,
    header_dict,
    make_producer,
    now_ms,
    produce_to_partition,
    wait_delivering,
)

PER_PARTITION = 40


def test_default_ids_stay_in_the_reading_shard_and_any_partition_cancels_them(
    sidecar_factory, new_topic, kafka_bootstrap
):
    sidecar = sidecar_factory("a").start()
    env = sidecar.env
    buffer, inbox = env["KPD_BUFFER_TOPIC"], f"{env['KPD_STATE_TOPIC_PREFIX']}delay-inbox"
    partitions = int(env["KPD_SHARDS"])  # kpd creates its buffer topic with one per shard
    assert partitions >= 2
    target = new_topic("defaults")
    with sidecar.client() as http:
        wait_delivering(http, new_topic("warm"))
    producer = make_producer(kafka_bootstrap)

    due = now_ms() + 3000
    ids = {}
    for p in range(partitions):
        records = [
            buffer_record(target, value=f"{p}-{i}".encode(), deliver_at=due)
            for i in range(PER_PARTITION)
        ]
        ids[p] = produce_to_partition(producer, buffer, p, records)
    # Each partition's first record is cancelled from the next partition: another shard's.
    cancelled = {ids[p][0] for p in range(partitions)}
    for p in range(partitions):
        cancel = [(None, None, [("kpd-cancel", ids[p][0].encode())])]
        produce_to_partition(producer, buffer, (p + 1) % partitions, cancel)
    expected = sorted({i for p in ids for i in ids[p]} - cancelled)

    with TopicReader(kafka_bootstrap, target) as reader:
        reader.read_until(lambda m: len(m) >= len(expected), 30, "the uncancelled records")
        messages = reader.read_for(1.0)  # settle: nothing extra may follow
    assert_never_early(messages)
    assert sorted(delivered_ids(messages)) == expected
    by_id = {header_dict(m)["kpd-id"].decode(): m.value() for m in messages}
    assert by_id[ids[1][5]] == b"1-5"  # the id names the record it was given to

    # Only the cancels crossed shards; every scheduled record stayed where it was read.
    with TopicReader(kafka_bootstrap, inbox) as reader:
        rekeyed = reader.read_for(1.0)
    assert len(rekeyed) == len(cancelled), f"{len(rekeyed)} re-keyed, not only the cancels"
    assert {header_dict(m)["kpd-cancel"].decode() for m in rekeyed} == cancelled
