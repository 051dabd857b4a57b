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


def delivering_sidecar(sidecar_factory, new_topic) -> tuple[dict[str, str], int]:
    """A sidecar that delivers; its environment, and its buffer partitions (one per shard)."""
    sidecar = sidecar_factory("a").start()
    partitions = int(sidecar.env["KPD_SHARDS"])  # kpd creates its buffer topic with one per shard
    assert partitions >= 2
    with sidecar.client() as http:
        wait_delivering(http, new_topic("warm"))
    return sidecar.env, partitions


def test_default_ids_stay_in_the_reading_shard_and_any_partition_cancels_them(
    sidecar_factory, new_topic, kafka_bootstrap
):
    env, partitions = delivering_sidecar(sidecar_factory, new_topic)
    buffer, inbox = env["KPD_BUFFER_TOPIC"], f"{env['KPD_STATE_TOPIC_PREFIX']}delay-inbox"
    target = new_topic("defaults")
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


NAMED_PER_PARTITION = 8


def test_a_named_id_written_like_a_default_one_is_placed_by_the_partition_it_names(
    sidecar_factory, new_topic, kafka_bootstrap
):
    """A `kpd-id` of the default form belongs to the shard of the partition it names, wherever it
    was produced: its state records land in that shard's partition of the schedules topic, where
    the index, a restart and the standbys look for them."""
    env, partitions = delivering_sidecar(sidecar_factory, new_topic)
    buffer, schedules = env["KPD_BUFFER_TOPIC"], f"{env['KPD_STATE_TOPIC_PREFIX']}schedules"
    target = new_topic("named")
    producer = make_producer(kafka_bootstrap)

    due = now_ms() + 2000
    named = {
        f"kpd:{p}-{1_000_000 + i}-1": p
        for p in range(partitions)
        for i in range(NAMED_PER_PARTITION)
    }
    for schedule_id, p in named.items():  # each produced to another partition than it names
        record = buffer_record(target, value=b"x", deliver_at=due, schedule_id=schedule_id)
        produce_to_partition(producer, buffer, (p + 1) % partitions, [record])
    with TopicReader(kafka_bootstrap, target) as reader:
        reader.read_until(lambda m: len(m) >= len(named), 30, "the named records")
        messages = reader.read_for(1.0)  # settle: nothing extra may follow
    assert_never_early(messages)
    assert sorted(delivered_ids(messages)) == sorted(named)

    def state_of_named(seen: list) -> list:
        return [m for m in seen if m.key().decode() in named]

    with TopicReader(kafka_bootstrap, schedules) as reader:
        # Each id's `scheduled` and `delivered` records.
        seen = reader.read_until(
            lambda m: len(state_of_named(m)) >= 2 * len(named), 30, "their state records"
        )
    placed = {(m.key().decode(), m.partition()) for m in state_of_named(seen)}
    assert placed == set(named.items())
