"""A transaction's plain records (`Transaction.add`), handed to librdkafka in batches, against a
real broker: where they land, in what order, and what a refusal does."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaException, Producer
from kafka_helpers import TopicReader

from foundation.kafka_clients import transactional_producer
from foundation.plain_records import SEND_EVERY
from foundation.producers_in_turn import ProducersInTurn
from foundation.refusals import RecordsRefused
from foundation.transactions import Transaction

LIMIT = 2_000  # the topic's max.message.bytes


def _producer(bootstrap: str, **config: object) -> Producer:
    producer = transactional_producer(
        {"bootstrap.servers": bootstrap, **config}, f"test-plain-{uuid.uuid4().hex[:8]}"
    )
    producer.init_transactions(30)
    return producer


def _keys_by_partition(messages: list) -> dict[int, list[str]]:
    placed: dict[int, list[str]] = {}
    for message in messages:
        placed.setdefault(message.partition(), []).append(message.key().decode())
    return placed


def test_plain_records_land_where_produce_puts_them_in_the_order_added(
    kafka_bootstrap: str, new_topic
) -> None:
    """More than one batch's worth, keyed (the partitioner's choice, as `produce` makes it) and
    placed: each partition holds its records in the order they were added, whether one at a
    time or several in one call (`add_many`)."""
    keyed, placed = new_topic("plain", partitions=4), new_topic("plain", partitions=4)
    count = SEND_EVERY * 2 + 17
    producer = _producer(kafka_bootstrap)
    txn = Transaction(ProducersInTurn.of(producer), 30)
    for start in range(0, count, 10):
        chunk = [(f"k{n}", b"v") for n in range(start, min(start + 10, count))]
        if start % 20:
            txn.add_many(keyed, chunk)
        else:
            for key, value in chunk:
                txn.add(keyed, key, value)
        for n in range(start, start + len(chunk)):
            txn.add(placed, f"p{n}", b"v", partition=n % 3)
    txn.commit()
    reference = new_topic("plain", partitions=4)
    by_produce = Transaction(ProducersInTurn.of(producer), 30)
    for n in range(count):
        by_produce.produce(reference, f"k{n}", b"v")
    by_produce.commit()

    with TopicReader(kafka_bootstrap, keyed) as reader:
        keyed_partitions = _keys_by_partition(reader.read_count(count, 30))
    with TopicReader(kafka_bootstrap, reference) as reader:
        assert keyed_partitions == _keys_by_partition(reader.read_count(count, 30))
    with TopicReader(kafka_bootstrap, placed) as reader:
        assert _keys_by_partition(reader.read_count(count, 30)) == {
            p: [f"p{n}" for n in range(count) if n % 3 == p] for p in range(3)
        }


def test_a_produce_after_plain_records_of_its_topic_comes_after_them(
    kafka_bootstrap: str, new_topic
) -> None:
    topic = new_topic("plain")
    txn = Transaction(ProducersInTurn.of(_producer(kafka_bootstrap)), 30)
    txn.add(topic, "first", b"1")
    txn.produce(topic, "second", b"2", headers=[("h", b"x")])
    txn.add(topic, "third", b"3")
    txn.commit()
    with TopicReader(kafka_bootstrap, topic) as reader:
        assert [m.key() for m in reader.read_count(3, 30)] == [b"first", b"second", b"third"]


def test_a_full_local_queue_delays_plain_records_without_losing_or_reordering_them(
    kafka_bootstrap: str, new_topic
) -> None:
    """A local queue of 5 records takes a batch of 300 in pieces: librdkafka refuses each
    batch's tail, which goes again once some records went out."""
    topic = new_topic("plain")
    producer = _producer(kafka_bootstrap, **{"queue.buffering.max.messages": 5})
    txn = Transaction(ProducersInTurn.of(producer), 30)
    for n in range(300):
        txn.add(topic, f"k{n:03d}", b"v")
    txn.commit()
    with TopicReader(kafka_bootstrap, topic) as reader:
        reader.read_count(300, 30)
        keys = [m.key().decode() for m in reader.read_for(0.5)]
    assert keys == [f"k{n:03d}" for n in range(300)]


@pytest.mark.parametrize("refused_by", ["broker", "client"])
def test_a_refused_plain_record_fails_the_step_as_an_infrastructure_fault(
    kafka_bootstrap: str, new_topic, refused_by: str
) -> None:
    """kpd writes plain records itself, so a refusal is no verdict on a user's record: the
    commit (or the add that sends a full batch) raises, and nothing of the step is visible."""
    topic = new_topic("plain", config={"max.message.bytes": str(LIMIT)})
    config = {"message.max.bytes": LIMIT * 2} if refused_by == "client" else {}
    txn = Transaction(ProducersInTurn.of(_producer(kafka_bootstrap, **config)), 30)
    txn.add(topic, "small", b"s")
    txn.add(topic, "big", b"x" * (LIMIT * 3))
    with pytest.raises(KafkaException) as raised:
        txn.commit()
    assert not isinstance(raised.value, RecordsRefused)
    # The broker's refusal fails the commit, which aborts; the client's is raised before
    # anything of the batch was sent, and the abort is left to the caller (the supervisor).
    assert txn.open == (refused_by == "client")
    if txn.open:
        txn.abort()
    with TopicReader(kafka_bootstrap, topic) as reader:
        assert reader.read_for(1.0) == []


def test_plain_records_after_a_refusal_leave_the_refused_tagged_record_named(
    kafka_bootstrap: str, new_topic
) -> None:
    """Added once the transaction is abortable, plain records are refused with _STATE: no fault
    of their own, so the commit still names the tagged record the broker refused."""
    topic = new_topic("plain", config={"max.message.bytes": str(LIMIT)})
    producer = _producer(kafka_bootstrap)
    txn = Transaction(ProducersInTurn.of(producer), 30)
    txn.produce(topic, b"big", b"x" * (LIMIT * 3), tag="the big one")
    producer.flush(30)  # the refusal is in: the transaction is abortable from here on
    for n in range(SEND_EVERY + 1):
        txn.add(topic, f"log{n}", b"s")
    with pytest.raises(RecordsRefused) as refused:
        txn.commit()
    assert set(refused.value.refused) == {"the big one"}
    with TopicReader(kafka_bootstrap, topic) as reader:
        assert reader.read_for(1.0) == []
