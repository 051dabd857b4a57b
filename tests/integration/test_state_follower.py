"""Reading a shard's state before and after the fence (`StateFollower.approach` / `catch_up`),
against a real broker, real transactions and RocksDB."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from confluent_kafka import Message, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from kafka_helpers import unique, wait_for
from store_helpers import held_stores

from delay_service.schedule_follower import schedule_reading
from delay_service.schedules import COLUMN_FAMILIES, Schedule, ScheduleIndex, State
from delay_service.writes import POSITION_EVERY
from devtools.broker_for_tests import topic_replication_from_env
from foundation.kafka_clients import partition_bounds, state_consumer
from foundation.shards import ShardMap
from foundation.state_follower import OFFSETS_CF, StateFollower
from foundation.store import Batch, Store


class Applied:
    def __init__(self) -> None:
        self.values: list[bytes] = []

    def __call__(self, _: Batch, messages: Sequence[Message]) -> None:
        self.values += [m.value() for m in messages]


def writer(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(30)
    return producer


def commit(producer: Producer, topic: str, values: list[bytes]) -> None:
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value=value)
    producer.commit_transaction(30)


def follower(bootstrap: str, tmp_path: Path, topic: str, applied: Applied) -> StateFollower:
    store = Store(tmp_path / "rocksdb", [OFFSETS_CF])
    state = StateFollower({"bootstrap.servers": bootstrap}, lambda _, __: store, {topic: applied})
    state.assign()
    return state


def test_approach_is_not_held_by_a_dead_writers_open_transaction_and_catch_up_reads_past_its_fence(
    new_topic, kafka_bootstrap, tmp_path
):
    topic, tid = new_topic("state"), f"tid-{time.monotonic_ns()}"
    old = writer(kafka_bootstrap, tid)
    committed = [f"c{i}".encode() for i in range(1000)]
    commit(old, topic, committed)
    old.begin_transaction()  # a leader that died mid-step: its transaction stays open
    for i in range(10):
        old.produce(topic, value=f"open{i}".encode())
    old.flush(30)
    applied = Applied()
    state = follower(kafka_bootstrap, tmp_path, topic, applied)
    began = time.monotonic()
    state.approach(timeout_s=30)
    took = time.monotonic() - began
    assert applied.values == committed
    assert took < 5  # the end it reads to is the last stable offset: not its 30 s bound
    new = writer(kafka_bootstrap, tid)  # the fence aborts the open transaction
    commit(new, topic, [b"after"])
    state.catch_up(timeout_s=30)
    assert applied.values == [*committed, b"after"]  # nothing of the aborted transaction
    assert state.caught_up
    state.close()


def test_approach_reads_up_to_the_end_while_the_writer_goes_on(
    new_topic, kafka_bootstrap, tmp_path
):
    topic = new_topic("state")
    live = writer(kafka_bootstrap, f"tid-{time.monotonic_ns()}")
    commit(live, topic, [f"a{i}".encode() for i in range(20_000)])
    stop = threading.Event()

    def keep_writing() -> None:
        i = 0
        while not stop.is_set():
            commit(live, topic, [f"b{i}".encode()])
            i += 1

    thread = threading.Thread(target=keep_writing)
    thread.start()
    try:
        applied = Applied()
        state = follower(kafka_bootstrap, tmp_path, topic, applied)
        state.approach(timeout_s=30)
        assert len(applied.values) >= 20_000  # up to the end as of the start, at least
        assert applied.values[:20_000] == [f"a{i}".encode() for i in range(20_000)]
        state.close()
    finally:
        stop.set()
        thread.join()


def test_a_partition_s_end_is_awaited_while_it_is_just_created(
    kafka_bootstrap, admin, topic_cleanup
) -> None:
    """Queried right after its topic's creation, a partition answers "not leader" for a moment
    (34 of 80 did on this broker), an answer librdkafka does not mark retriable: its end is
    awaited instead (a standby's catch-up failed on it and restarted)."""
    topics = [unique("fresh") for _ in range(5)]
    topic_cleanup.names.update(topics)
    replication = topic_replication_from_env(os.environ)
    consumer = state_consumer({"bootstrap.servers": kafka_bootstrap}, "test-fresh")
    try:
        consumer.list_topics(timeout=10)  # connected: the queries below go out at once
        for topic in topics:
            spec = NewTopic(topic, 4, replication_factor=replication)
            admin.create_topics([spec])[topic].result(timeout=30)
            deadline = time.monotonic() + 30
            tps = [TopicPartition(topic, p) for p in range(4)]
            ends = [partition_bounds(consumer, tp, deadline, 10)[1] for tp in tps]
            assert ends == [0, 0, 0, 0]
    finally:
        consumer.close()


def test_a_schedule_reading_takes_the_heads_fast_path_only_once_caught_up(
    new_topic, kafka_bootstrap, tmp_path, monkeypatch
):
    """`schedule_reading` wires its applier to the reading's own progress: records read to catch
    up go through the general path, those that come after (past the ones a restart may meet
    again) through `ScheduleIndex.stage_followed`; the index ends the same either way."""
    topic = new_topic("schedules")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})

    def produce(records: list[Schedule]) -> None:
        for record in records:
            producer.produce(topic, key=record.schedule_id.encode(), value=record.encode())
        producer.flush(30)

    scheduled = [
        Schedule(schedule_id=f"id-{n}", state=State.SCHEDULED, target="t", due_ms=10_000 + n)
        for n in range(POSITION_EVERY + 6)
    ]
    produce(scheduled)
    stores = held_stores(tmp_path / "shards", [*COLUMN_FAMILIES, OFFSETS_CF], 1)
    index = ScheduleIndex(stores, ShardMap(1, 1))
    fast: list[int] = []  # records staged by the fast path, per call
    staged = index.stage_followed
    monkeypatch.setattr(index, "stage_followed", lambda *a: fast.append(len(a[2])) or staged(*a))
    config = {"bootstrap.servers": kafka_bootstrap}
    reading = schedule_reading(config, index, topic, lambda *_: True)

    def applied() -> bool:
        reading.poll_once(0.5)
        return index.count_pending() == len(scheduled) - len(done)

    try:
        reading.assign()
        reading.catch_up(timeout_s=30)
        assert fast == [] and index.count_pending() == len(scheduled)
        done = [record.settled(State.DELIVERED, 20_000) for record in scheduled[:4]]
        produce(done)
        wait_for(applied, 30, "the deliveries applied")
        assert sum(fast) == len(done)
        assert [index.get(0, r.schedule_id) for r in done] == done
    finally:
        reading.close()
        stores.close()
