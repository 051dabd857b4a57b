"""Leases held in memory (`leases = "memory"`, docs/lease-modes.md) over real HTTP and Kafka: a
pop is answered with no transaction of its own; the next ack, lease change or expiry writes its
lease; a crash forgets the leases not written yet, whose messages come back at once with the
delivery count they had."""

from __future__ import annotations

import signal
import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from kafka_helpers import (
    make_producer,
    metric_total,
    metric_values,
    pop_until,
    produce_all,
    unique,
)

from kpd_client import KpdClient
from revive.records import AckRecord, CheckpointRecord, StateRecord, unpack_batch

MEMORY = {"group_defaults__leases": "memory", "groups__durable__leases": "durable"}


def produce(bootstrap: str, topic: str, values: list[str]) -> None:
    produce_all(make_producer(bootstrap), topic, [(v.encode(), v.encode(), []) for v in values])


def ledger_records(bootstrap: str, sidecar, group: str) -> list[StateRecord]:
    """Every committed pop-state record of `group`, read to the end of the topic as it is now
    (an answered durable pop's record is committed, so it is there)."""
    topic = f"{sidecar.env['KPD_STATE_TOPIC_PREFIX']}pop-state"
    config = {"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex}
    consumer = Consumer(
        {**config, "isolation.level": "read_committed", "enable.auto.commit": False}
    )
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1] for p in partitions
        }
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        found: list[StateRecord] = []
        deadline = time.monotonic() + 30
        while any(tp.offset < ends[tp.partition] for tp in consumer.position(
            [TopicPartition(topic, p) for p in partitions if ends[p] > 0]
        )):  # fmt: skip
            if time.monotonic() > deadline:
                pytest.fail(f"{topic} not read to its end in 30 s")
            for message in consumer.consume(1000, 0.2):
                if message.error() is None and message.key().decode().startswith(f"{group}/"):
                    found += unpack_batch(message.value())
        return found
    finally:
        consumer.close()


def test_a_memory_lease_is_written_by_its_ack_not_by_its_pop(
    sidecar_factory, new_topic, kafka_bootstrap
) -> None:
    sidecar = sidecar_factory("a", shards="1", workers="1", **MEMORY).start()
    topic = new_topic()
    produce(kafka_bootstrap, topic, [f"m{i}" for i in range(3)])
    group = unique("g")
    with KpdClient(sidecar.url) as kpd:
        popped = pop_until(kpd, group, topic, 3)
        assert ledger_records(kafka_bootstrap, sidecar, group) == []  # handed out, not written
        assert kpd.group(group)["config"]["leases"] == "memory"
        assert {r["status"] for r in kpd.ack(group, [m.receipt for m in popped])} == {"acked"}
        written = ledger_records(kafka_bootstrap, sidecar, group)
        leased = [o for r in written if isinstance(r, CheckpointRecord) for o in r.offsets]
        acked = [r.offset for r in written if isinstance(r, AckRecord)]
        assert sorted(leased) == sorted(acked) == [0, 1, 2]
        first_ack = next(i for i, r in enumerate(written) if isinstance(r, AckRecord))
        assert all(isinstance(r, CheckpointRecord) for r in written[:first_ack])  # leases first
        # The durable group beside it: its pop is answered once its lease is written.
        assert len(pop_until(kpd, "durable", topic, 1)) == 1
        assert [type(r) for r in ledger_records(kafka_bootstrap, sidecar, "durable")] == [
            CheckpointRecord
        ]


def test_a_crash_forgets_unwritten_leases_and_keeps_the_written(
    sidecar_factory, new_topic, kafka_bootstrap
) -> None:
    """SIGKILL: leases no transaction wrote are gone, so their messages come back at once (long
    before the lease would have ended), with the delivery count of the lost attempt; an acked
    message never comes back, and a lease its checkpoint's ack and its own lease change wrote
    still holds."""
    sidecar = sidecar_factory("a", shards="1", workers="1", **MEMORY).start()
    topic = new_topic()
    produce(kafka_bootstrap, topic, [f"c{i}" for i in range(6)])
    group = unique("g")
    with KpdClient(sidecar.url) as kpd:
        first = pop_until(kpd, group, topic, 3, invisible_ms=300_000)  # one checkpoint
        acked, extended = first[:2], first[2:]
        assert {r["status"] for r in kpd.ack(group, [m.receipt for m in acked])} == {"acked"}
        assert kpd.extend(group, [m.receipt for m in extended], 300_000)[0]["status"] == "ok"
        # Popped after the last write: nothing of these leases is in Kafka.
        lost = pop_until(kpd, group, topic, 3, invisible_ms=300_000)
        assert {m.delivery_count for m in first + lost} == {1}
        lease_end = min(m.invisible_until_ms for m in lost)
    sidecar.terminate(signal.SIGKILL)
    sidecar.start()
    with KpdClient(sidecar.url) as kpd:
        back = pop_until(kpd, group, topic, len(lost), invisible_ms=300_000)
        assert time.time() * 1000 < lease_end  # back at once, not when the lease would end
        assert sorted(m.value for m in back) == sorted(m.value for m in lost)
        assert {m.delivery_count for m in back} == {1}  # the lost attempt is not counted
        # The acked ones never return, and the extended one stays invisible.
        assert kpd.pop(group, topic, max_messages=10, wait_ms=1500) == []
        # A receipt of a forgotten lease names a checkpoint no ledger holds.
        assert kpd.ack(group, [lost[0].receipt])[0]["status"] == "invalid"
        assert {r["status"] for r in kpd.ack(group, [m.receipt for m in back])} == {"acked"}
        assert kpd.ack(group, [extended[0].receipt])[0]["status"] == "acked"


def test_a_memory_lease_that_ends_is_revived_with_the_next_count(
    sidecar_factory, new_topic, kafka_bootstrap
) -> None:
    sidecar = sidecar_factory("a", shards="1", workers="1", **MEMORY).start()
    topic = new_topic()
    produce(kafka_bootstrap, topic, ["e0"])
    group = unique("g")
    with KpdClient(sidecar.url) as kpd:
        first = pop_until(kpd, group, topic, 1, invisible_ms=1000)
        again = pop_until(kpd, group, topic, 1, invisible_ms=60_000)
        assert [m.value for m in again] == [m.value for m in first]
        assert again[0].delivery_count == 2
        assert again[0].timestamp_ms >= first[0].invisible_until_ms  # copied once it ended
        with sidecar.client() as http:
            assert metric_total(metric_values(http), "kpd_pop_retried_total") == 1
