"""Ack and produce in one transaction: a worker settles what it consumed and writes what it made
of it in one atomic step (`POST /v1/groups/{group}/ack` with `produce`), or nothing changes.

The shard's step asks each ledger first what an ack would answer (`ack_status`): unless every
receipt would answer `acked` or `acked_late`, the call changes nothing and says why per receipt.
Otherwise the acks, the produced records and, for a call with a `request_id`, the answer
(`revive.answered_calls`) go in the step's transaction: a read_committed reader sees the records
exactly when the acks are durable, and a retry of the call answers as the first did.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from foundation.clock import now_ms
from revive.ledger import ACKED, ACKED_LATE, INVALID
from revive.pop_state import LedgerKey, PopState
from revive.pop_step import PopStep
from revive.records import AnswerRecord
from revive.requests import AckProduceRequest
from revive.settle import ack_leases

Outcome = Literal["done", "not_acked", "request_id_reused"]


@dataclass(frozen=True)
class AckProduceAnswer:
    outcome: Outcome
    results: list[dict[str, Any]] = field(default_factory=list)  # one per receipt
    produced: list[dict[str, Any]] = field(default_factory=list)  # one per record, when done


def ack_and_produce(request: AckProduceRequest, state: PopState, step: PopStep) -> AckProduceAnswer:
    """Serve `request` in `step`; its receipts are all this shard's."""
    now = now_ms()
    call = None if request.request_id is None else (request.group, request.request_id)
    if call is not None and (answered := state.answered.find(call, now)) is not None:
        if answered.digest != request.digest:
            return AckProduceAnswer("request_id_reused")
        return _answer(request, orjson.loads(answered.answer))
    leases: list[tuple[LedgerKey, int, int] | None] = []
    statuses = []
    for _, receipt in request.items:
        ledger = None
        if receipt is not None:
            key = (request.group, receipt.topic, receipt.partition)
            ledger = state.ledgers.get(key)
        if ledger is None or receipt is None:
            leases.append(None)
            statuses.append(INVALID)
            continue
        leases.append((key, receipt.checkpoint_id, receipt.offset))
        statuses.append(ledger.ack_status(receipt.checkpoint_id, receipt.offset, now))
    if not all(status in (ACKED, ACKED_LATE) for status in statuses):
        return _answer(request, {"statuses": statuses, "produced": []}, "not_acked")
    ack_leases(state, leases, step, now)
    for record in request.produce:
        extra = {} if record.partition is None else {"partition": record.partition}
        step.txn.produce(record.topic, record.key, record.value, headers=record.headers, **extra)
    stored = {"statuses": statuses, "produced": [record.answer for record in request.produce]}
    if call is not None:
        first = leases[0]  # its ledger's records carry the answer: the shard's partition
        assert first is not None  # every receipt was acked
        answer = AnswerRecord(*first[0], call[1], request.digest, now, orjson.dumps(stored))
        state.apply(answer)
        step.record(answer)
    return _answer(request, stored)


def _answer(
    request: AckProduceRequest, stored: dict[str, Any], outcome: Outcome = "done"
) -> AckProduceAnswer:
    results = [
        {"receipt": text, "status": status}
        for (text, _), status in zip(request.items, stored["statuses"], strict=True)
    ]
    return AckProduceAnswer(outcome, results, stored["produced"])
