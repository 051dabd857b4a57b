"""Pop: hand out the next records of a (group, topic) under one lease per lane partition.

Each lane partition's share of a pop is one checkpoint (`CheckpointRecord`), written in the
step's transaction; the caller is answered only after it commits. A group with leases held in
memory is answered at once: its checkpoint is written with the next transaction of the shard
(`revive.pop_step.Unwritten`, docs/lease-modes.md). A retry-topic record whose kpd
headers cannot be trusted is never handed out: it is leased and dead-lettered at once, with the
reason, so it fails only itself and the committed offset moves past it.

A lane batch's receipts, answers and DELIVERED events are made by the compiled core
(`kpd_core`) in one call each: the answers as JSON fragments the HTTP layer writes as they are.
"""

from __future__ import annotations

import orjson
from kpd_core import DeliveryRenderer

from foundation.clock import now_ms
from foundation.config import Settings
from revive import metrics
from revive.copies import KPD_HEADERS
from revive.fetcher import GroupFetcher
from revive.held_records import HeldRecords
from revive.lanes import UNTRUSTED, Fetched, LaneKey
from revive.ledger import Outcome
from revive.pop_state import PopState
from revive.pop_step import Copy, PopStep
from revive.receipt import ReceiptCodec
from revive.records import AckRecord, CheckpointRecord
from revive.requests import PopRequest


class Leaser:
    def __init__(
        self, settings: Settings, state: PopState, codec: ReceiptCodec, held: HeldRecords
    ) -> None:
        self._settings, self._state, self._codec, self._held = settings, state, codec, held
        self._renderer = DeliveryRenderer(settings.node_id, KPD_HEADERS)

    def lease(
        self, request: PopRequest, fetcher: GroupFetcher, step: PopStep
    ) -> list[orjson.Fragment]:
        taken = fetcher.take(request.topic, request.max_messages)
        if not taken:
            return []
        now = now_ms()
        deadline = now + request.invisible_ms
        durable = self._settings.group(request.group).leases == "durable"
        out: list[orjson.Fragment] = []
        for (lane, partition), batch in _by_lane(taken).items():
            key = (request.group, lane, partition)
            checkpoint = self._checkpoint(key, batch, deadline, now, step, durable)
            counts = checkpoint.delivery_counts
            texts = self._codec.encode_batch(
                *key, checkpoint.checkpoint_id, checkpoint.offsets, counts
            )
            self._held.keep(key, [source for source, _ in batch])  # for a nack's copy
            answers, events = self._renderer.render(
                request.group, batch, counts, texts, now, deadline
            )
            out += map(orjson.Fragment, answers)
            step.log_events(events, durable)
        metrics.POPPED.inc(len(out))
        return out

    def dead_letter_unpoppable(self, fetcher: GroupFetcher, step: PopStep) -> None:
        """Lease and dead-letter at once the retry records no pop can ask for: those whose kpd
        headers are untrusted, and the copies of a topic deleted since (`GroupFetcher.deleted`:
        dead-lettered, never dropped, as principle 3 asks)."""
        now = now_ms()
        for origin in (UNTRUSTED, *sorted(fetcher.deleted)):
            taken = fetcher.take(origin, limit=10_000)
            for (lane, partition), batch in _by_lane(taken).items():
                key = (fetcher.group, lane, partition)
                checkpoint = self._checkpoint(key, batch, now, now, step)
                self._held.keep(key, (source for source, _ in batch))
                for source, found in batch:
                    offset = source.offset
                    settled = AckRecord(
                        *key, checkpoint.checkpoint_id, offset, Outcome.DEAD_LETTERED, now
                    )
                    self._state.apply(settled)
                    step.record(settled)
                    if origin == UNTRUSTED:
                        reason, count = f"kpd headers cannot be trusted: {found.distrust}", 1
                    else:
                        reason = f"its topic {origin!r} was deleted"
                        count = found.previous_deliveries
                    step.copies.append(Copy(key, offset, count, reason, 0))

    def _checkpoint(
        self,
        key: tuple[str, str, int],
        batch: list[Fetched],
        deadline: int,
        now: int,
        step: PopStep,
        durable: bool = True,
    ) -> CheckpointRecord:
        record = CheckpointRecord(
            *key,
            self._state.new_checkpoint_id(),
            # Comprehensions, not generators: one call per batch, not one resumption per record.
            tuple([source.offset for source, _ in batch]),
            tuple([found.previous_deliveries + 1 for _, found in batch]),
            deadline,
            now,
        )
        self._state.apply(record)
        step.record(record, durable)
        return record


def _by_lane(taken: list[tuple[LaneKey, Fetched]]) -> dict[LaneKey, list[Fetched]]:
    by_lane: dict[LaneKey, list[Fetched]] = {}
    for lane, fetched in taken:
        by_lane.setdefault(lane, []).append(fetched)
    return by_lane
