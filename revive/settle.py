"""Ending deliveries: ack, nack, lease changes, reject, and leases that expired (revive).

Each outcome is an `AckRecord` or `DeadlineRecord` in the step's transaction; a message that must
come back or go to the dead-letter topic becomes a `Copy` the step writes in the same
transaction, so a retry exists exactly when the delivery it replaces is marked settled.
"""

from __future__ import annotations

from typing import Any

from foundation.clock import now_ms
from foundation.config import GroupSettings, Settings
from revive import metrics
from revive.key_lane import KeyLane
from revive.ledger import ACKED, ACKED_LATE, INVALID, OK, Outcome
from revive.ledger_replay import Ledger, settle
from revive.pop_state import LedgerKey, PopState
from revive.pop_step import Copy, PopStep
from revive.receipt import Receipt
from revive.records import AckRecord, DeadlineRecord
from revive.requests import SettleRequest


class Settler:
    def __init__(self, settings: Settings, state: PopState) -> None:
        self._settings, self._state = settings, state

    def settle(self, request: SettleRequest, step: PopStep) -> list[dict[str, Any]]:
        """Settle receipts the router has verified and found to be this shard's."""
        if request.kind == "ack":
            return self._ack(request, step)
        results = []
        group = self._settings.group(request.group)
        now = now_ms()
        for text, receipt, argument in request.items:
            key = (request.group, receipt.topic, receipt.partition)
            ledger = self._state.ledgers.get(key)
            if ledger is None:
                results.append({"receipt": text, "status": "invalid"})
                continue
            entry: dict[str, Any] = {"receipt": text}
            status = self._one(
                request.kind, group, (key, ledger), receipt, (argument, now), step, entry
            )
            entry["status"] = status
            results.append(entry)
        return results

    def _ack(self, request: SettleRequest, step: PopStep) -> list[dict[str, Any]]:
        """Acks, the common call: each ledger's ack records encoded together once all are in."""
        group = request.group
        leases: list[tuple[LedgerKey, int, int] | None] = [
            ((group, r.topic, r.partition), r.checkpoint_id, r.offset) for _, r, _ in request.items
        ]
        statuses = ack_leases(self._state, leases, step, now_ms())
        return [
            {"receipt": text, "status": status}
            for (text, _, _), status in zip(request.items, statuses, strict=True)
        ]

    def expire(self, step: PopStep) -> int | None:
        """Leases that ended without an ack: available again at once, or dead-lettered. Returns
        when the next lease may end (epoch ms; None: no lease is open)."""
        now = now_ms()
        soonest: int | None = None
        for key, ledger in self._state.ledgers.items():
            group = self._settings.group(key[0])
            for cp, offset, count in ledger.expired(now):
                reason = _exhausted(group) if count >= group.max_deliveries else None
                outcome = _outcome(ledger, reason)
                if settle(ledger, cp, offset, outcome, now) != OK:
                    continue
                step.record(AckRecord(*key, cp, offset, outcome, now))
                if outcome is not Outcome.RELEASED:
                    step.copies.append(Copy(key, offset, count, reason, 0))
            deadlines = [ledger.next_deadline_ms(), soonest]
            if isinstance(ledger, KeyLane):  # a released message available again later
                deadlines.append(ledger.next_available_ms(now))
            soonest = min((d for d in deadlines if d is not None), default=None)
        return soonest

    def _one(
        self,
        kind: str,
        group: GroupSettings,
        lane: tuple[LedgerKey, Ledger],
        receipt: Receipt,
        call: tuple[Any, int],
        step: PopStep,
        entry: dict[str, Any],
    ) -> str:
        """Settle one receipt other than by an ack; its status (`entry` may get more fields, and
        a copy refers to it, so a nack the copier has to dead-letter answers what really
        happened)."""
        (key, ledger), (argument, now) = lane, call
        cp, offset = receipt.checkpoint_id, receipt.offset
        if kind == "leases":
            until = now + int(argument)
            status = ledger.change_deadline(cp, offset, until, now)
            if status != OK:
                return status
            step.record(DeadlineRecord(*key, cp, offset, until, now))
            entry["invisible_until_ms"] = until
            return "ok"
        if kind == "reject":
            reason: str | None = f"rejected: {argument}" if argument else "rejected"
        elif receipt.delivery_count >= group.max_deliveries:
            reason = _exhausted(group)
        else:
            reason = None
        outcome = _outcome(ledger, reason)
        delay = 0
        if kind == "nack" and reason is None:
            # Without delay_ms, the group's backoff for this delivery (the last one repeats).
            backoff = group.backoff_ms[min(receipt.delivery_count, len(group.backoff_ms)) - 1]
            delay = backoff if argument is None else int(argument)
        status = settle(ledger, cp, offset, outcome, now + delay)
        if status != OK:
            return status
        # A release in place is available again at its time: its record says when.
        at = now + delay if outcome is Outcome.RELEASED else now
        step.record(AckRecord(*key, cp, offset, outcome, at))
        if outcome is not Outcome.RELEASED:
            step.copies.append(Copy(key, offset, receipt.delivery_count, reason, delay, entry))
        return "requeued" if reason is None else "dead_lettered"


def ack_leases(
    state: PopState, leases: list[tuple[LedgerKey, int, int] | None], step: PopStep, now: int
) -> list[str]:
    """Ack each (ledger, checkpoint id, offset) lease (None: a receipt of no ledger here); the
    status of each. The step writes each ledger's acks together."""
    statuses = []
    acked: dict[LedgerKey, list[tuple[int, int]]] = {}
    for lease in leases:
        ledger = None if lease is None else state.ledgers.get(lease[0])
        if ledger is None or lease is None:
            statuses.append(INVALID)
            continue
        key, checkpoint_id, offset = lease
        status = ledger.ack(checkpoint_id, offset, now)
        if status in (ACKED, ACKED_LATE):
            acked.setdefault(key, []).append((checkpoint_id, offset))
        statuses.append(status)
    for key, acks in acked.items():
        step.acked(key, acks, now)
    if acked:  # one increment per call: a locked counter costs 1 us a time
        metrics.ACKED.inc(sum(map(len, acked.values())))
    return statuses


def _outcome(ledger: Ledger, reason: str | None) -> Outcome:
    """How a lease that was not acked ends: dead-lettered with a reason, else requeued as a
    retry copy, or released in place in a lane ordered by key (docs/fifo.md)."""
    if reason is not None:
        return Outcome.DEAD_LETTERED
    return Outcome.RELEASED if isinstance(ledger, KeyLane) else Outcome.REQUEUED


def _exhausted(group: GroupSettings) -> str:
    return f"max deliveries ({group.max_deliveries}) reached"
