"""A shard's pop bookkeeping: one ledger per lane partition, and how far each was leased.

It changes only through state records (`revive.records`): the live service applies each record
it writes, and a new leader (or a standby) applies the records it reads, so both reach the same
state. It also knows where in the pop-state topic each live checkpoint's record is: the lowest
such offset per partition is the *replay floor* (RocketMQ's revive offset). Nothing below it is
needed to rebuild the ledgers, so a new leader replays from the floor, and takeover time does not
grow with the topic.
"""

from __future__ import annotations

from collections.abc import Iterable

import structlog

from foundation.clock import now_ms
from foundation.shards import ShardMap
from revive.ledger import PartitionLedger
from revive.records import CheckpointRecord, StateRecord, apply

log = structlog.get_logger(__name__)

LedgerKey = tuple[str, str, int]  # (group, lane, partition)
# Checkpoint ids grow with time, so a new leader never reuses the id of a checkpoint that fell
# below the replay floor: an old receipt can never name a new lease.
ID_BITS_PER_MS = 10


class PopState:
    def __init__(self, shards: ShardMap) -> None:
        self._shards = shards
        self.ledgers: dict[LedgerKey, PartitionLedger] = {}
        self.last_leased: dict[LedgerKey, int] = {}  # offsets up to it were handed out
        self.next_checkpoint = 1
        self.dead_lettered: dict[str, int] = {}  # per group, since this leader started
        self._record_at: dict[tuple[LedgerKey, int], tuple[int, int]] = {}  # -> (part, offset)
        self._ends: dict[int, int] = {}  # pop-state partition -> the offset after the last seen

    def apply(self, record: StateRecord) -> str:
        """Apply one record (live or replayed); the status the ledger answered."""
        key = record.key
        ledger = self.ledgers.get(key)
        if isinstance(record, CheckpointRecord):
            if ledger is None:
                ledger = self.ledgers[key] = PartitionLedger(record.offsets[0])
            self.last_leased[key] = record.offsets[-1]
            self.next_checkpoint = max(self.next_checkpoint, record.checkpoint_id + 1)
        if ledger is None:
            return "invalid"  # its checkpoint fell out of retention: nothing left to settle
        return apply(ledger, record)

    def replay(self, records: Iterable[tuple[int, int, list[StateRecord]]]) -> int:
        """Apply (partition, offset, records) in log order; a record the ledgers refuse is
        skipped (and counted), so one bad record can never keep a new leader from starting."""
        skipped = 0
        for partition, offset, batch in records:
            for record in batch:
                try:
                    self.apply(record)
                except ValueError as error:
                    skipped += 1
                    log.warning("skipping a pop-state record kpd cannot apply", error=str(error))
                    continue
                if isinstance(record, CheckpointRecord):
                    self._record_at[(record.key, record.checkpoint_id)] = (partition, offset)
            self._ends[partition] = max(self._ends.get(partition, 0), offset + 1)
        return skipped

    def new_checkpoint_id(self) -> int:
        checkpoint_id = max(self.next_checkpoint, now_ms() << ID_BITS_PER_MS)
        self.next_checkpoint = checkpoint_id + 1
        return checkpoint_id

    def partition_of(self, key: LedgerKey) -> int:
        """The pop-state partition of a ledger: its source partition's, so its shard's."""
        group, lane, partition = key
        return self._shards.lane_partition(group, lane.split("/", 1)[0], partition)

    def wrote(self, key: LedgerKey, checkpoints: list[int], partition: int, offset: int) -> None:
        """A state record of `key` holding `checkpoints` is at `partition`/`offset`."""
        for checkpoint_id in checkpoints:
            self._record_at[(key, checkpoint_id)] = (partition, offset)
        self._ends[partition] = max(self._ends.get(partition, 0), offset + 1)

    def floors(self, partitions: Iterable[int]) -> dict[int, int]:
        """The replay floor of each of `partitions`: the record of the oldest live checkpoint,
        else everything seen. Forgets where settled checkpoints were."""
        floors = {p: self._ends.get(p, 0) for p in partitions}
        live: dict[tuple[LedgerKey, int], tuple[int, int]] = {}
        for key, ledger in self.ledgers.items():
            for checkpoint_id in ledger.live_checkpoints():
                place = self._record_at.get((key, checkpoint_id))
                if place is None:
                    continue
                live[(key, checkpoint_id)] = place
                partition, offset = place
                if partition in floors:
                    floors[partition] = min(floors[partition], offset)
        self._record_at = live
        return floors
