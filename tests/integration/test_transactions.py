"""A step's transaction against a real broker: what a refused record does to it."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaException
from kafka_helpers import TopicReader

from foundation.kafka_clients import transactional_producer
from foundation.transactions import RecordsRefused, RefusalUnknown, Transaction

LIMIT = 2_000  # the topic's max.message.bytes: the broker refuses bigger batches


@pytest.fixture
def producer(kafka_bootstrap: str):
    producer = transactional_producer(
        {"bootstrap.servers": kafka_bootstrap}, f"test-txn-{uuid.uuid4().hex[:8]}"
    )
    producer.init_transactions(30)
    yield producer
    producer.flush(10)


def test_a_refused_record_without_a_tag_fails_the_commit_as_an_infrastructure_fault(
    kafka_bootstrap: str, new_topic, producer
) -> None:
    """Untagged records ask for no delivery report; the broker's refusal still fails the commit
    (the role then restarts with a new producer, as for any infrastructure fault)."""
    topic = new_topic("txn", config={"max.message.bytes": str(LIMIT)})
    step = Transaction(producer, 30)
    step.produce(topic, b"small", b"s")
    step.produce(topic, b"big", b"x" * (LIMIT * 3))
    with pytest.raises(KafkaException) as raised:
        step.commit()
    assert not isinstance(raised.value, RecordsRefused)
    assert not step.open  # aborted, not committed
    with TopicReader(kafka_bootstrap, topic) as reader:
        assert reader.read_for(1.0) == []  # read_committed: nothing of the step is visible


def test_a_refused_tagged_record_is_named_and_the_commit_aborts(
    kafka_bootstrap: str, new_topic, producer
) -> None:
    topic = new_topic("txn", config={"max.message.bytes": str(LIMIT)})
    step = Transaction(producer, 30)
    step.produce(topic, b"big", b"x" * (LIMIT * 3), tag="the big one")
    with pytest.raises(RecordsRefused) as refused:
        step.commit()
    assert set(refused.value.refused) == {"the big one"}
    assert not step.open


def test_an_untracked_step_whose_tagged_record_is_refused_asks_for_a_tracked_redo(
    kafka_bootstrap: str, new_topic, producer
) -> None:
    """The fast path asks for no delivery reports: a refusal cannot be named, so the commit fails
    with `RefusalUnknown` (the caller redoes the step tracked), and nothing becomes visible."""
    topic = new_topic("txn", config={"max.message.bytes": str(LIMIT)})
    step = Transaction(producer, 30, tracked=False)
    step.produce(topic, b"small", b"s", tag="the small one")
    step.produce(topic, b"big", b"x" * (LIMIT * 3), tag="the big one")
    with pytest.raises(RefusalUnknown):
        step.commit()
    assert not step.open
    assert step.refused == {}  # untracked: nobody is named
    with TopicReader(kafka_bootstrap, topic) as reader:
        assert reader.read_for(1.0) == []


def test_an_untracked_step_that_nothing_refused_commits(
    kafka_bootstrap: str, new_topic, producer
) -> None:
    topic = new_topic("txn", config={"max.message.bytes": str(LIMIT)})
    step = Transaction(producer, 30, tracked=False)
    for n in range(5):
        step.produce(topic, f"k{n}".encode(), b"v", tag=n)
    step.commit()
    with TopicReader(kafka_bootstrap, topic) as reader:
        assert sorted(m.key() for m in reader.read_count(5, 15)) == [
            f"k{n}".encode() for n in range(5)
        ]
