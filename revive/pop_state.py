"""A shard's pop bookkeeping: one ledger per lane partition, and how far each was leased.

It changes only through state records (`revive.records`): the live service applies each record
it writes, and a new leader (or a standby) applies the records it reads, so both reach the same
state. It also knows where in the pop-state topic each checkpoint's record is: the lowest such
offset per partition, over the checkpoints still needed, is the *replay floor* (RocketMQ's revive
offset). Nothing below it is needed to rebuild the ledgers, so a new leader replays from the
floor, and takeover time does not grow with the topic.

A checkpoint is needed until the group's committed offset has passed its offsets, not merely
until they are settled: a new leader fetches the group from its committed offset, and skips what
the replayed ledgers say was leased. A settled checkpoint below the floor whose offsets the group
had not committed yet would be handed out again as a first delivery.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import structlog

from foundation.clock import now_ms
from foundation.config import Settings
from foundation.shards import ShardMap
from revive.answered_calls import AnsweredCalls
from revive.key_lane import KeyLane
from revive.lanes import source_topic
from revive.ledger import PartitionLedger
from revive.ledger_replay import Ledger, apply
from revive.records import AnswerRecord, CheckpointRecord, ForgetRecord, SeekRecord, StateRecord

log = structlog.get_logger(__name__)

LedgerKey = tuple[str, str, int]  # (group, lane, partition)
Written = tuple[int, int]  # a checkpoint's id and its last offset
# Checkpoint ids grow with time, so a new leader never reuses the id of a checkpoint that fell
# below the replay floor: an old receipt can never name a new lease.
ID_BITS_PER_MS = 10


def orders_by_key(settings: Settings) -> Callable[[LedgerKey], bool]:
    """Is a lane one of a group ordered by key? Its origin lanes are; its retry topic's lanes,
    which carry only redriven dead letters, are not (docs/fifo.md)."""
    return lambda key: "/" not in key[1] and settings.group(key[0]).ordering == "key"


class PopState:
    def __init__(
        self, shards: ShardMap, ordered: Callable[[LedgerKey], bool] = lambda _: False
    ) -> None:
        self._shards = shards
        self._ordered = ordered  # does this lane's group order by key? (docs/fifo.md)
        self.ledgers: dict[LedgerKey, Ledger] = {}
        self.last_leased: dict[LedgerKey, int] = {}  # offsets up to it were handed out
        self.next_checkpoint = 1
        self.dead_lettered: dict[str, int] = {}  # per group, since this leader started
        self.answered = AnsweredCalls()  # answers of calls with a request_id
        # (ledger, checkpoint id) -> (pop-state partition, offset of its record, its last offset)
        self._record_at: dict[tuple[LedgerKey, int], tuple[int, int, int]] = {}
        self._ends: dict[int, int] = {}  # pop-state partition -> the offset after the last seen

    def apply(self, record: StateRecord) -> str:
        """Apply one record (live or replayed); the status the ledger answered."""
        key = record.key
        if isinstance(record, ForgetRecord):
            self.drop({key})
            return "ok"
        if isinstance(record, AnswerRecord):
            self.answered.remember(record)
            return "ok"
        ledger = self.ledgers.get(key)
        if isinstance(record, CheckpointRecord | SeekRecord):
            if ledger is None:
                ledger = self.ledgers[key] = self.new_ledger(key, record)
            if isinstance(ledger, PartitionLedger):  # a lane by key reads all again
                last = record.offsets[-1] if isinstance(record, CheckpointRecord) else None
                # after a seek, pops go on from the new position
                self.last_leased[key] = record.offset - 1 if last is None else last
            if isinstance(record, CheckpointRecord):
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
                    place = (partition, offset, record.offsets[-1])
                    self._record_at[(record.key, record.checkpoint_id)] = place
                elif isinstance(record, AnswerRecord):
                    self.answered.placed((record.group, record.request_id), partition, offset)
            self._reached(partition, offset + 1)
        return skipped

    def key_lane(self, key: LedgerKey) -> KeyLane:
        """The lane by key of `key` (an ordered group's origin lane), made if new."""
        lane = self.ledgers.get(key)
        if lane is None:
            lane = self.ledgers[key] = KeyLane()
        assert isinstance(lane, KeyLane)
        return lane

    def new_ledger(self, key: LedgerKey, record: CheckpointRecord | SeekRecord) -> Ledger:
        """The ledger of a lane met first in `record`."""
        if self._ordered(key):
            return KeyLane()
        start = record.offsets[0] if isinstance(record, CheckpointRecord) else record.offset
        return PartitionLedger(start)

    def drop(self, keys: set[LedgerKey]) -> None:
        """Forget ledgers: their topic was deleted, or their group."""
        for key in keys:
            self.ledgers.pop(key, None)
            self.last_leased.pop(key, None)
        self._record_at = {at: place for at, place in self._record_at.items() if at[0] not in keys}

    def new_checkpoint_id(self) -> int:
        checkpoint_id = max(self.next_checkpoint, now_ms() << ID_BITS_PER_MS)
        self.next_checkpoint = checkpoint_id + 1
        return checkpoint_id

    def partition_of(self, key: LedgerKey) -> int:
        """The pop-state partition of a ledger: its source partition's, so its shard's."""
        group, lane, partition = key
        return self._shards.lane_partition(group, source_topic(lane), partition)

    def read_up_to(self, ends: dict[int, int]) -> None:
        """Every record below `ends` (per pop-state partition) was read: with no checkpoint
        needed, a floor goes there, never back to 0 where nothing was read above the floor."""
        for partition, end in ends.items():
            self._reached(partition, end)

    def wrote(
        self,
        key: LedgerKey,
        held: tuple[list[Written], list[str]],
        partition: int,
        offset: int,
    ) -> None:
        """A state record of `key` holding checkpoints and answers of calls with these request
        ids (`held`) is at `partition`/`offset`."""
        checkpoints, request_ids = held
        for checkpoint_id, last in checkpoints:
            self._record_at[(key, checkpoint_id)] = (partition, offset, last)
        for request_id in request_ids:
            self.answered.placed((key[0], request_id), partition, offset)
        self._reached(partition, offset + 1)

    def _reached(self, partition: int, end: int) -> None:
        self._ends[partition] = max(self._ends.get(partition, 0), end)

    def floors(
        self, partitions: Iterable[int], committed: Callable[[LedgerKey], int]
    ) -> dict[int, int]:
        """The replay floor of each of `partitions`: the record of the oldest checkpoint whose
        offsets the group has not committed past (`committed(key)`: the group's committed offset
        of that ledger's source partition, as far as this leader knows, else -1) or of the
        oldest answer still remembered, else everything seen. Forgets where the checkpoints
        committed past were."""
        floors = {p: self._ends.get(p, 0) for p in partitions}
        for partition, offset in self.answered.floors(now_ms()).items():
            if partition in floors:
                floors[partition] = min(floors[partition], offset)
        needed: dict[tuple[LedgerKey, int], tuple[int, int, int]] = {}
        marks: dict[LedgerKey, int] = {}
        for (key, checkpoint_id), place in self._record_at.items():
            mark = marks.get(key)
            if mark is None:
                mark = marks[key] = committed(key)
            partition, offset, last = place
            if last < mark:
                continue  # the group committed past it: a new leader never fetches it again
            needed[(key, checkpoint_id)] = place
            if partition in floors:
                floors[partition] = min(floors[partition], offset)
        self._record_at = needed
        return floors

    def forget_below(self, floors: dict[int, int]) -> int:
        """Forget where checkpoints below the committed replay floors were (a standby's state:
        the shard's leader released them); how many places are still known."""
        self.answered.forget_below(floors)
        self._record_at = {
            at: place
            for at, place in self._record_at.items()
            if place[1] >= floors.get(place[0], 0)
        }
        return len(self._record_at)
