"""Seek: a group's position in a topic moves, and every delivery made before it is over.

In the shard's step, for each partition of the topic this shard serves: the new offset is found
(an end, or the first record at or after a time), the partition's ledger ends every open lease
(`PartitionLedger.seek`: their receipts answer `superseded`), a `SeekRecord` makes that durable,
the fetcher reads on from the new offset with nothing buffered, and the group's offset commits
there in the same transaction, with the seek's stamp. Retry copies of the topic made before the
seek (`revive.seek_stamps`) are dropped: the buffered ones now, those still to come as they
are read, and the leases of those already handed out end as the originals' do. The router
(`api.seek`) sends a seek to every shard: any may hold the topic's retry copies.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import TopicPartition

from foundation.clock import now_ms
from revive import seek_stamps
from revive.copier import Copier
from revive.fetcher import GroupFetcher
from revive.lanes import origin_topic
from revive.ledger import OK, Outcome
from revive.offsets import GroupOffsets, OffsetCommitter
from revive.pop_state import LedgerKey, PopState
from revive.pop_step import PopStep
from revive.records import AckRecord, SeekRecord
from revive.requests import SeekRequest

EARLIEST, LATEST = "earliest", "latest"


class Seeker:
    def __init__(
        self, state: PopState, copier: Copier, offsets: OffsetCommitter, timeout_s: float
    ) -> None:
        self._state, self._copier, self._offsets = state, copier, offsets
        self._timeout_s = timeout_s

    def seek(
        self,
        request: SeekRequest,
        fetcher: GroupFetcher,
        moved: list[tuple[int, int]],
        step: PopStep,
    ) -> list[dict[str, Any]]:
        """Apply the seek here, to `moved` (`positions`); the new offset of each partition."""
        group, topic = request.group, request.topic
        # A stamp no later than the one known here is a seek already applied, or one that
        # raced a later seek: the later stamp stays (stamps never go back).
        stamp = max(request.stamp, fetcher.seek_stamps.get(topic, 0))
        now = now_ms()
        for partition, offset in moved:
            record = SeekRecord(group, topic, partition, offset, now)
            self._state.apply(record)
            step.record(record)
            fetcher.reposition(topic, partition, offset)
        if moved:
            offsets = [seek_stamps.offset(topic, p, o, stamp) for p, o in moved]
            metadata = fetcher.consumer.consumer_group_metadata()
            step.txn.send_offsets(offsets, metadata)
            self._offsets.sent([GroupOffsets(group, offsets, metadata)])
        fetcher.raise_stamp(topic, stamp)
        step.drop_retries(group, topic)  # a nack served before the seek in this step
        self._end_stale_retries(group, topic, stamp, step, now)
        return [{"partition": p, "offset": o} for p, o in moved]

    def positions(self, fetcher: GroupFetcher, request: SeekRequest) -> list[tuple[int, int]]:
        """(partition, new offset) for each partition of the topic served here: asked of the
        broker, before anything changes."""
        mine = sorted(p for t, p in fetcher.partitions_of(request.topic) if t == request.topic)
        consumer, timeout_s = fetcher.consumer, self._timeout_s
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(request.topic, p), timeout=timeout_s)
            for p in mine
        }
        if request.to == EARLIEST:
            return [(p, ends[p][0]) for p in mine]
        if request.to == LATEST:
            return [(p, ends[p][1]) for p in mine]
        assert request.time_ms is not None
        asked = [TopicPartition(request.topic, p, request.time_ms) for p in mine]
        found = consumer.offsets_for_times(asked, timeout=timeout_s) if asked else []
        # No record at or after the time: the partition's end.
        return [
            (tp.partition, tp.offset if tp.offset >= 0 else ends[tp.partition][1]) for tp in found
        ]

    def _end_stale_retries(
        self, group: str, topic: str, stamp: int, step: PopStep, now: int
    ) -> None:
        """End the open leases of retry copies of `topic` made before the seek: as requeued,
        with no copy (their receipts answer `superseded`)."""
        open_leases: dict[LedgerKey, list[tuple[int, int]]] = {
            key: ledger.open_leases()
            for key, ledger in self._state.ledgers.items()
            if key[0] == group and "/" in key[1] and origin_topic(key[1]) == topic
        }
        places = [(key, offset) for key, leases in open_leases.items() for _, offset in leases]
        records = self._copier.records(places) if places else {}
        for key, leases in open_leases.items():
            ledger = self._state.ledgers[key]
            for checkpoint_id, offset in leases:
                record = records.get((key, offset))
                if record is not None and not seek_stamps.made_before(record, stamp):
                    continue  # a copy of a delivery made after the seek
                if ledger.settle(checkpoint_id, offset, Outcome.REQUEUED) == OK:
                    step.record(AckRecord(*key, checkpoint_id, offset, Outcome.REQUEUED, now))
