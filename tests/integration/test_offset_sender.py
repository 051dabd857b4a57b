"""Group offsets committed in a transaction of their own (`revive.offsets.OffsetSender`), against
a real broker: a topic deleted since its offsets were taken costs only its own offsets."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka_helpers import unique, wait_for

from foundation.kafka_clients import transactional_producer
from foundation.producers_in_turn import ProducersInTurn
from foundation.topics import TopicCache
from revive.offsets import GroupOffsets, OffsetSender


@pytest.fixture
def producers(kafka_bootstrap: str) -> Iterator[ProducersInTurn]:
    producers = ProducersInTurn(
        lambda txn_id: transactional_producer({"bootstrap.servers": kafka_bootstrap}, txn_id),
        f"test-offsets-{uuid.uuid4().hex[:8]}",
    )
    producers.init_transactions(30)
    yield producers
    producers.release()


def group_member(kafka_bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})


def committed(kafka_bootstrap: str, group: str, topic: str) -> int:
    consumer = group_member(kafka_bootstrap, group)
    try:
        [tp] = consumer.committed([TopicPartition(topic, 0)], timeout=30)
        return tp.offset
    finally:
        consumer.close()


def deleted_topic(admin: AdminClient, new_topic) -> str:
    doomed = new_topic("doomed")
    for future in admin.delete_topics([doomed]).values():
        future.result(timeout=30)
    wait_for(lambda: doomed not in admin.list_topics(timeout=10).topics, 30, "the topic gone")
    return doomed


def offsets_of(sent: list[GroupOffsets]) -> list[tuple[str, list[tuple[str, int]]]]:
    return [(o.group, [(tp.topic, tp.offset) for tp in o.offsets]) for o in sent]


def test_the_offsets_of_a_deleted_topic_are_left_out_and_the_others_committed(
    kafka_bootstrap: str, admin: AdminClient, new_topic, producers: ProducersInTurn
) -> None:
    kept, other, doomed = new_topic("kept"), new_topic("other"), deleted_topic(admin, new_topic)
    group, other_group = unique("g"), unique("g")
    member = group_member(kafka_bootstrap, group)
    other_member = group_member(kafka_bootstrap, other_group)
    batch = [
        GroupOffsets(
            group, [TopicPartition(kept, 0, 5), TopicPartition(doomed, 0, 3)],
            member.consumer_group_metadata(),
        ),
        GroupOffsets(
            other_group, [TopicPartition(other, 0, 7)], other_member.consumer_group_metadata()
        ),
    ]  # fmt: skip
    sender = OffsetSender(producers, 30, TopicCache(admin, 30).exists_now)
    started = time.monotonic()
    sent, deleted = sender.send(batch)
    took = time.monotonic() - started
    assert deleted == {group: {doomed}}
    assert offsets_of(sent) == [(group, [(kept, 5)]), (other_group, [(other, 7)])]
    assert committed(kafka_bootstrap, group, kept) == 5
    assert committed(kafka_bootstrap, other_group, other) == 7
    # Left out before the send: the broker's refusal would have taken the 30 s timeout.
    assert took < 10, f"the send took {took:.1f} s"
    member.close()
    other_member.close()


def test_a_topic_deleted_after_the_look_is_refused_then_left_out(
    kafka_bootstrap: str, admin: AdminClient, new_topic, producers: ProducersInTurn
) -> None:
    """The look before the send saw the topic (it was deleted just after): the broker refuses the
    transaction, and the offsets go again without that topic, on the same producers."""
    kept, doomed = new_topic("kept"), deleted_topic(admin, new_topic)
    group = unique("g")
    member = group_member(kafka_bootstrap, group)
    cache, looks = TopicCache(admin, 30), []

    def exists(topic: str) -> bool:
        looks.append(topic)
        seen_before_its_deletion = topic == doomed and looks.count(doomed) == 1
        return seen_before_its_deletion or cache.exists_now(topic)

    sender = OffsetSender(producers, 3, exists)  # the refusal comes after this timeout
    offsets = [TopicPartition(kept, 0, 4), TopicPartition(doomed, 0, 3)]
    sent, deleted = sender.send([GroupOffsets(group, offsets, member.consumer_group_metadata())])
    assert looks.count(doomed) == 2  # looked at again after the refusal
    assert (offsets_of(sent), deleted) == ([(group, [(kept, 4)])], {group: {doomed}})
    assert committed(kafka_bootstrap, group, kept) == 4
    member.close()
