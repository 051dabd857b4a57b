"""Applying state records (`revive.records`) to ledgers.

``apply(ledger, record)`` feeds one record through the same ledger methods the live leader
called, with the record's own timestamps, so ``replay(records)`` on a fresh process rebuilds
ledgers that answer exactly as the live ones did. A ledger starts at its first checkpoint's first
offset; ack / deadline records whose checkpoint is unknown (retention removed its
``CheckpointRecord``) answer ``invalid`` and change nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from revive.key_lane import KeyLane
from revive.ledger import Outcome, PartitionLedger
from revive.records import (
    AckRecord,
    AnswerRecord,
    CheckpointRecord,
    ForgetRecord,
    LedgerKey,
    SeekRecord,
    StateRecord,
)

# A lane's ledger: in offset order, or by key for a group that orders by key (docs/fifo.md).
Ledger = PartitionLedger | KeyLane


def apply(ledger: Ledger, record: StateRecord) -> str:
    """Apply one record to its ledger; returns the status the live call returned."""
    if isinstance(record, CheckpointRecord):
        ledger.open_checkpoint(
            record.checkpoint_id, record.offsets, record.delivery_counts, record.deadline_ms
        )
        return "ok"
    if isinstance(record, AckRecord):
        lease = (record.checkpoint_id, record.offset)
        if record.outcome is Outcome.ACKED:
            return ledger.ack(*lease, record.at_ms)
        return settle(ledger, *lease, record.outcome, record.at_ms)
    if isinstance(record, SeekRecord):
        ledger.seek(record.offset)
        return "ok"
    if isinstance(record, ForgetRecord | AnswerRecord):
        return "ok"  # the ledger's owner drops it; an answer is the owner's to remember
    return ledger.change_deadline(
        record.checkpoint_id, record.offset, record.deadline_ms, record.at_ms
    )


def settle(ledger: Ledger, checkpoint_id: int, offset: int, outcome: Outcome, at_ms: int) -> str:
    """End a lease other than by an ack. A lane by key releases it in place, available again at
    `at_ms`, where an offset-ordered ledger settles it as requeued (its retry is a copy)."""
    if not isinstance(ledger, KeyLane):
        return ledger.settle(checkpoint_id, offset, outcome)
    if outcome is Outcome.DEAD_LETTERED:
        return ledger.dead_letter(checkpoint_id, offset)
    return ledger.release(checkpoint_id, offset, at_ms)


def replay(records: Iterable[StateRecord]) -> dict[LedgerKey, PartitionLedger]:
    """Rebuild every ledger from its state records, in log order."""
    ledgers: dict[LedgerKey, PartitionLedger] = {}
    for record in records:
        if isinstance(record, ForgetRecord):
            ledgers.pop(record.key, None)
            continue
        if isinstance(record, AnswerRecord):
            continue
        ledger = ledgers.get(record.key)
        if ledger is None:
            if isinstance(record, SeekRecord):
                ledger = ledgers[record.key] = PartitionLedger(record.offset)
            elif not isinstance(record, CheckpointRecord):
                continue  # its checkpoint fell out of retention: nothing left to settle
            else:
                ledger = ledgers[record.key] = PartitionLedger(record.offsets[0])
        apply(ledger, record)
    return ledgers
