"""A step's transaction against a real broker: what a refused record does to it."""

from __future__ import annotations

import itertools
import time
import uuid
from contextlib import nullcontext

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from kafka_helpers import TopicReader, unique

from foundation.kafka_clients import transactional_producer
from foundation.producers_in_turn import ProducersInTurn
from foundation.refusals import RecordsRefused, RefusalUnknown
from foundation.supervision import LoopHealth, StopRequested
from foundation.transactions import Transaction

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
    step = Transaction(ProducersInTurn.of(producer), 30)
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
    step = Transaction(ProducersInTurn.of(producer), 30)
    step.produce(topic, b"big", b"x" * (LIMIT * 3), tag="the big one")
    with pytest.raises(RecordsRefused) as refused:
        step.commit()
    assert set(refused.value.refused) == {"the big one"}
    assert not step.open


def test_a_refusal_ends_the_commit_s_wait_for_the_records_queued_behind_it(
    kafka_bootstrap: str, new_topic
) -> None:
    """Records queued behind a refused batch are held by librdkafka until the abort purges them;
    the commit used to wait for their delivery reports until its timeout (30 s here), in about
    one transaction of three (a full test run, stop 40). Several tries, so the hold is met."""
    for attempt in range(5):
        topic = new_topic("txn", config={"max.message.bytes": str(LIMIT)})
        producer = transactional_producer(
            {"bootstrap.servers": kafka_bootstrap, "batch.size": LIMIT - 100},
            f"test-txn-{uuid.uuid4().hex[:8]}",
        )
        producer.init_transactions(30)
        step = Transaction(ProducersInTurn.of(producer), 30)
        for n in range(600):
            if n == 300:
                step.produce(topic, b"big", b"x" * (LIMIT * 2), tag="the big one")
            step.produce(topic, f"k{n}".encode(), b"small" * 4, tag=n)
        started = time.monotonic()
        with pytest.raises(RecordsRefused) as refused:
            step.commit()
        waited = time.monotonic() - started
        assert "the big one" in refused.value.refused
        assert waited < 10, f"try {attempt}: the commit waited {waited:.1f} s after the refusal"


def test_an_untracked_step_whose_tagged_record_is_refused_asks_for_a_tracked_redo(
    kafka_bootstrap: str, new_topic, producer
) -> None:
    """The fast path asks for no delivery reports: a refusal cannot be named, so the commit fails
    with `RefusalUnknown` (the caller redoes the step tracked), and nothing becomes visible."""
    topic = new_topic("txn", config={"max.message.bytes": str(LIMIT)})
    step = Transaction(ProducersInTurn.of(producer), 30, tracked=False)
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
    step = Transaction(ProducersInTurn.of(producer), 30, tracked=False)
    for n in range(5):
        step.produce(topic, f"k{n}".encode(), b"v", tag=n)
    step.commit()
    with TopicReader(kafka_bootstrap, topic) as reader:
        assert sorted(m.key() for m in reader.read_count(5, 15)) == [
            f"k{n}".encode() for n in range(5)
        ]


def test_records_queued_after_a_refusal_reached_the_producer_are_no_fault_of_their_own(
    kafka_bootstrap: str, new_topic, producer
) -> None:
    """A long step can still be queueing records when the broker's refusal of an earlier one
    arrives: the transaction is then abortable and librdkafka refuses every later record with
    _STATE. That must not fail the step as an infrastructure fault (the role would restart, and
    the refused record would come back): the commit names the refused record, as without the
    records after it."""
    topic = new_topic("txn", config={"max.message.bytes": str(LIMIT)})
    step = Transaction(ProducersInTurn.of(producer), 30)
    step.produce(topic, b"big", b"x" * (LIMIT * 3), tag="the big one")
    producer.flush(30)  # the refusal is in: the transaction is abortable from here on
    step.produce(topic, b"after", b"s", tag="an innocent one")
    step.produce(topic, b"log", b"s")
    with pytest.raises(RecordsRefused) as refused:
        step.commit()
    assert set(refused.value.refused) == {"the big one"}
    assert not step.open
    with TopicReader(kafka_bootstrap, topic) as reader:
        assert reader.read_for(1.0) == []


def test_an_untracked_step_failed_before_its_offsets_are_sent_asks_for_a_tracked_redo(
    kafka_bootstrap: str, new_topic, producer
) -> None:
    """The same in the fast path, where the refusal goes unreported: the records after it are
    left out, and sending the step's offsets (which fails in the abortable state) asks for a
    tracked redo instead of failing as an infrastructure fault."""
    topic = new_topic("txn", config={"max.message.bytes": str(LIMIT)})
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"g-{topic}"})
    try:
        step = Transaction(ProducersInTurn.of(producer), 30, tracked=False)
        step.produce(topic, b"big", b"x" * (LIMIT * 3), tag="the big one")
        producer.flush(30)
        step.produce(topic, b"after", b"s", tag="an innocent one")
        with pytest.raises(RefusalUnknown):
            step.send_offsets([TopicPartition(topic, 0, 1)], consumer.consumer_group_metadata())
        assert not step.open
    finally:
        consumer.close()
    with TopicReader(kafka_bootstrap, topic) as reader:
        assert reader.read_for(1.0) == []


def in_turn(bootstrap: str, txn_id: str, health: LoopHealth | None = None) -> ProducersInTurn:
    config = {"bootstrap.servers": bootstrap}
    fencing = health.fencing if health is not None else nullcontext
    return ProducersInTurn(lambda i: transactional_producer(config, i), txn_id, fencing=fencing)


def test_producers_in_turn_run_each_transaction_on_the_other_id_and_keep_the_last_offsets(
    kafka_bootstrap: str, new_topic
) -> None:
    """Consecutive transactions alternate ids (the next never waits for the markers of the one
    just committed), every record becomes visible once, and the group's committed offset is
    the last one sent, though two producers sent them in turn."""
    topic = new_topic("txn")
    producers = in_turn(kafka_bootstrap, unique("txn"))
    producers.init_transactions(30)
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": unique("g")})
    taken = []
    try:
        for n in range(1, 21):
            step = Transaction(producers, 30)
            step.produce(topic, None, f"{n}".encode())
            step.send_offsets([TopicPartition(topic, 0, n)], consumer.consumer_group_metadata())
            step.commit()
            taken.append(step._producer)
        (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
    finally:
        consumer.close()
    assert len(set(map(id, taken))) == 2
    assert all(a is not b for a, b in itertools.pairwise(taken))
    assert committed.offset == 20
    with TopicReader(kafka_bootstrap, topic) as reader:
        values = [int(m.value()) for m in reader.read_for(1.0)]
    assert values == list(range(1, 21))
    producers.release()


def test_a_new_owner_fences_every_id_of_the_role(kafka_bootstrap: str, new_topic) -> None:
    """The old owner fails on whichever id it takes next: never two writers."""
    topic, txn_id = new_topic("txn"), unique("txn")
    old = in_turn(kafka_bootstrap, txn_id)
    old.init_transactions(30)
    in_turn(kafka_bootstrap, txn_id).init_transactions(30)  # the new owner
    for _ in range(2):
        step = Transaction(old, 30)
        step.produce(topic, None, b"zombie")
        with pytest.raises(KafkaException) as fenced:
            step.commit()
        assert fenced.value.args[0].fatal()
    with TopicReader(kafka_bootstrap, topic) as reader:
        assert reader.read_for(1.0) == []


@pytest.mark.parametrize("told", ["stop_requested", "released"])
def test_a_role_told_to_go_before_its_fence_leaves_the_next_owner_writing(
    kafka_bootstrap: str, new_topic, told: str
) -> None:
    """A role asked to stop, or released (its shard is another member's now), before its
    start's `init_transactions` never sends it: the shard's next owner, which fenced the ids
    meanwhile, commits on every one of them (a pop role stopped while starting used to fence
    it, and the new owner's first commit failed)."""
    topic, txn_id = new_topic("txn"), unique("txn")
    health = LoopHealth("pop", 0)
    old = in_turn(kafka_bootstrap, txn_id, health)
    new = in_turn(kafka_bootstrap, txn_id)
    new.init_transactions(30)
    setattr(health, told, True)
    with pytest.raises(StopRequested):
        old.init_transactions(30)
    assert not health.in_fence
    for n in range(2):  # one transaction on each id
        step = Transaction(new, 30)
        step.produce(topic, None, f"owner {n}".encode())
        step.commit()
    with TopicReader(kafka_bootstrap, topic) as reader:
        values = [m.value() for m in reader.read_count(2, 30)]
    assert values == [b"owner 0", b"owner 1"]
