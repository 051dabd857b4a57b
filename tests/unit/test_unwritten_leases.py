"""`revive.pop_step`: what memory-lease pops leave unwritten goes first in the next transaction,
in the order of the pops, and stays bounded (docs/lease-modes.md). A recording producer stands
in for librdkafka: only the order of what the step hands it is checked."""

from __future__ import annotations

from typing import Any

import pytest
from kpd_core import DeliveryRenderer

from foundation.producers_in_turn import ProducersInTurn
from foundation.shards import ShardMap
from revive import pop_step
from revive.copies import KPD_HEADERS, Origin, Provenance
from revive.ledger import Outcome
from revive.pop_state import PopState
from revive.pop_step import PopStep, Unwritten
from revive.records import AckRecord, CheckpointRecord, unpack_batch
from revive.source_record import SourceRecord

KEY = ("g", "orders", 0)
RENDERER = DeliveryRenderer("node", KPD_HEADERS)


class RecordingProducer:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def begin_transaction(self) -> None:
        self.calls.append(("begin", None))

    def produce(self, topic: str, value: bytes | None = None, key: Any = None, **_: Any) -> None:
        self.calls.append((topic, value))

    def produce_batch(self, topic: str, records: list[dict[str, Any]], **_: Any) -> int:
        self.calls += [(topic, record["value"]) for record in records]
        return len(records)

    def flush(self, _: float) -> int:
        return 0

    def commit_transaction(self, _: float) -> None:
        self.calls.append(("commit", None))


def step_of(producer: RecordingProducer, unwritten: Unwritten) -> PopStep:
    return PopStep(ProducersInTurn.of(producer), 10, "log", "node", unwritten)  # type: ignore[arg-type]


def pop(step: PopStep, checkpoint_id: int, offset: int) -> None:
    """What `Leaser.lease` asks of a step for one message of a memory-lease group."""
    step.record(CheckpointRecord(*KEY, checkpoint_id, (offset,), (1,), 9_000, 1_000), False)
    source = SourceRecord("orders", 0, offset, None, b"v", (), 1_000)
    batch = [(source, Provenance(Origin.here(source), 0))]
    _, events = RENDERER.render("g", batch, [1], ["receipt"], 1_000, 9_000)
    step.log_events(events, False)


def test_pops_write_nothing_until_a_transaction_opens_and_then_go_first() -> None:
    producer, unwritten = RecordingProducer(), Unwritten()
    state = PopState(ShardMap(1, 1))
    first = step_of(producer, unwritten)
    pop(first, 1, 0)
    pop(first, 2, 1)
    assert not first.txn.open and producer.calls == []  # the pops' answers need no commit

    second = step_of(producer, unwritten)
    second.record(AckRecord(*KEY, 1, 0, Outcome.ACKED, 2_000))
    second.write_records("state", state)
    second.txn.commit()
    kinds = [call[0] for call in producer.calls]
    # One state record per ledger; the log events go as a batch before the commit.
    assert kinds == ["begin", "state", "log", "log", "commit"]
    written = unpack_batch(producer.calls[1][1])
    assert [type(r) for r in written] == [CheckpointRecord, CheckpointRecord, AckRecord]
    assert [r.checkpoint_id for r in written] == [1, 2, 1]
    assert unwritten.take() == ([], [])


def test_a_pop_in_a_step_whose_transaction_is_open_is_written_by_it() -> None:
    producer, unwritten = RecordingProducer(), Unwritten()
    step = step_of(producer, unwritten)
    step.record(AckRecord(*KEY, 1, 0, Outcome.ACKED, 2_000))
    pop(step, 2, 1)
    assert unwritten.take() == ([], [])
    step.txn.commit()
    assert [call[0] for call in producer.calls] == ["begin", "log", "commit"]


def test_unwritten_events_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pop_step, "UNWRITTEN_MAX_EVENTS", 2)
    producer, unwritten = RecordingProducer(), Unwritten()
    step = step_of(producer, unwritten)
    pop(step, 1, 0)
    pop(step, 2, 1)
    assert not step.txn.open
    pop(step, 3, 2)  # the third would pass the bound: it opens the transaction, with the rest
    assert step.txn.open
    step.txn.send_added()
    assert [call[0] for call in producer.calls] == ["begin", "log", "log", "log"]
    assert unwritten.take() == ([], [])


def test_the_leases_of_a_dropped_ledger_are_never_written() -> None:
    producer, unwritten = RecordingProducer(), Unwritten()
    step = step_of(producer, unwritten)
    pop(step, 1, 0)
    other = ("g", "invoices", 0)
    step.record(CheckpointRecord(*other, 2, (0,), (1,), 9_000, 1_000), False)
    unwritten.forget({KEY})  # its topic was deleted
    records, events = unwritten.take()
    assert [r.key for r in records] == [other]
    assert len(events) == 1  # the delivery happened: its event stays
