"""Schedule state: the records of the schedules topic and their RocksDB index.

The compacted schedules topic (key = schedule id) is the truth. Each value is one of
  scheduled  {target, due, key, value, headers, enqueued}   the full record to deliver later
  delivered  {target, due, at}                              payload dropped: compaction frees it
  cancelled  {target, due, at, reason}
Delivered and cancelled are terminal: applying an older `scheduled` record after them changes
nothing, so re-reading the topic (restart, failover, rebuild) is always safe.

RocksDB: one store per shard (`foundation.store.ShardStores`, held by the worker that leads or
keeps the shard), holding that shard's ids in the column families
  schedule  id -> the latest state record (as in the topic)
  due       shard (2 bytes) + due_ms (8 bytes), big endian, + id -> b""   only `scheduled` ones,
            ordered by time
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from enum import StrEnum

import msgspec

from foundation.shards import ShardMap
from foundation.store import Batch, ShardStores, Store

SCHEDULE_CF = "schedule"
# Kept beside the ids (which never start with a NUL byte) so followers and a new leader know the
# backlog size of each shard without scanning millions of keys.
PENDING_COUNT_KEY = b"\x00pending"
# The index layout and shard count it was built for; another one is cleared and rebuilt.
FORMAT_KEY = b"\x00format"
FORMAT = b"3"
DUE_CF = "due"
COLUMN_FAMILIES = (SCHEDULE_CF, DUE_CF)


class Freshness(StrEnum):
    """How well one worker's index follows one shard's schedules (`Conductor.freshness`)."""

    CURRENT = "current"  # a delay role here writes them, or a caught-up standby applies them
    CATCHING_UP = "catching_up"  # soon current: the role or standby that will keep them starts
    ELSEWHERE = "elsewhere"  # not kept here: ask the shard's owner


class State(StrEnum):
    SCHEDULED = "scheduled"
    DELIVERED = "delivered"
    CANCELLED = "cancelled"


_STORED_NAMES = {
    "schedule_id": "i",
    "state": "s",
    "target": "t",
    "due_ms": "d",
    "key": "k",
    "value": "v",
    "headers": "h",
    "enqueued_ms": "e",
    "at_ms": "a",
    "reason": "r",
}


class Schedule(msgspec.Struct, kw_only=True, omit_defaults=True, rename=_STORED_NAMES, gc=False):
    """One schedule's state; stored (topic value, RocksDB) as a msgpack map of short names.

    Decoded and encoded in C by msgspec. The map is the one kpd has always written: absent
    optional fields take their defaults, and fields at their defaults are left out.

    Not tracked by the garbage collector (`gc=False`; its fields are atoms and tuples of atoms,
    so it can be part of no reference cycle): a burst drain holds some 16k of them in its steps,
    and every collection walked them all.
    """

    schedule_id: str = ""  # the record's key, never part of the stored value
    state: State
    target: str
    due_ms: int
    key: bytes | None = None
    value: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    enqueued_ms: int = 0
    at_ms: int | None = None  # when it was delivered or cancelled
    reason: str | None = None

    def encode(self) -> bytes:
        return _ENCODER.encode(msgspec.structs.replace(self, schedule_id=""))

    @classmethod
    def decode(cls, schedule_id: str, data: bytes) -> Schedule:
        """Raises `msgspec.DecodeError` (a `ValueError`) on a value kpd did not write."""
        schedule = _DECODER.decode(data)
        schedule.schedule_id = schedule_id
        return schedule

    def settled(self, state: State, at_ms: int, reason: str | None = None) -> Schedule:
        """The terminal record that replaces this one (no payload)."""
        return Schedule(
            schedule_id=self.schedule_id,
            state=state,
            target=self.target,
            due_ms=self.due_ms,
            enqueued_ms=self.enqueued_ms,
            at_ms=at_ms,
            reason=reason,
        )


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(Schedule)


def _moves_forward(current: Schedule, record: Schedule) -> bool:
    """Scheduled -> delivered or cancelled; or a cancel that came before its schedule learning
    the schedule's target. Nothing else: terminal states are final, the first schedule wins."""
    if current.state is State.SCHEDULED:
        return record.state is not State.SCHEDULED
    return (
        current.state is State.CANCELLED
        and not current.target
        and record.state is State.CANCELLED
        and bool(record.target)
    )


def _decoded(schedule_id: str, data: bytes | None) -> Schedule | None:
    return None if data is None else Schedule.decode(schedule_id, data)


def due_key(shard: int, due_ms: int, schedule_id: str) -> bytes:
    return shard.to_bytes(2, "big") + due_ms.to_bytes(8, "big") + schedule_id.encode()


def _pending_key(shard: int) -> bytes:
    return PENDING_COUNT_KEY + shard.to_bytes(2, "big")


class ScheduleIndex:
    """Reads and idempotent writes of schedule state in RocksDB, a store per shard. Each call
    names the shard of its ids (`ShardMap.of_key`): the callers on a shard's paths know it."""

    def __init__(self, stores: ShardStores, shard_map: ShardMap) -> None:
        self.stores = stores  # each shard's, held by the role or standby here that keeps it
        self.shards = shard_map

    def store(self, shard: int) -> Store:
        """The store of `shard`'s schedules (a batch for `stage` comes from it). Raises
        `NotHeld` if no role here holds it."""
        return self.stores.of(shard)

    def partition_store(self, _topic: str, partition: int) -> Store:
        """The store of a schedules-topic partition's shard (a `StateFollower`'s `store_of`)."""
        return self.stores.of(self.shards.of_partition(partition))

    def ensure_format(self, store: Store, offsets_cf: str, schedules_topic: str) -> bool:
        """Clear a shard's store of another layout (it is rebuilt from Kafka); True if it was.
        Run as each store opens (`ShardStores.on_open`), before anything reads it."""
        wanted = FORMAT + self.shards.shards.to_bytes(2, "big")
        if store.get(SCHEDULE_CF, FORMAT_KEY) == wanted:
            return False
        store.clear([SCHEDULE_CF, DUE_CF])
        store.clear_prefix(offsets_cf, f"{schedules_topic}:".encode())
        batch = store.batch()
        batch.put(SCHEDULE_CF, FORMAT_KEY, wanted)
        store.write(batch)
        return True

    def get(self, shard: int, schedule_id: str) -> Schedule | None:
        return _decoded(schedule_id, self.store(shard).get(SCHEDULE_CF, schedule_id.encode()))

    def find(self, schedule_id: str) -> Schedule | None:
        """`get` for a caller that has only the id, on another thread (the API): its shard is
        the id's, and the store stays open for the read. Raises `NotHeld` if no role here holds
        the shard's store."""
        with self.stores.borrowed(self.shards.of_key(schedule_id)) as store:
            return _decoded(schedule_id, store.get(SCHEDULE_CF, schedule_id.encode()))

    def get_many(self, shard: int, schedule_ids: list[str]) -> list[Schedule | None]:
        found = self.store(shard).get_many(SCHEDULE_CF, [sid.encode() for sid in schedule_ids])
        return [_decoded(sid, data) for sid, data in zip(schedule_ids, found, strict=True)]

    def stage(
        self,
        batch: Batch,
        shard: int,
        records: Sequence[Schedule],
        encoded: Sequence[bytes],
        found: Mapping[str, Schedule | None] | None = None,
    ) -> list[Schedule]:
        """Stage `records` of ids of `shard` (in order) into `batch`; return those that changed
        state. `encoded[i]` is `records[i]` as the schedules topic holds it, stored as it is.

        A record that would go backwards is skipped: terminal states are final, and the same id
        scheduled twice keeps the first schedule. Later records see earlier ones of the batch.
        `found` holds ids' current states the caller has read already (not read again).
        """
        staged: dict[str, Schedule | None] = dict(found or {})
        applied = []
        pending = self.count_pending(shard)
        put_schedule, put_due = batch.putter(SCHEDULE_CF), batch.putter(DUE_CF)
        for record, value in zip(records, encoded, strict=True):
            sid = record.schedule_id
            current = staged[sid] if sid in staged else self.get(shard, sid)
            if current is not None and not _moves_forward(current, record):
                continue
            if current is not None and current.state is State.SCHEDULED:
                batch.delete(DUE_CF, due_key(shard, current.due_ms, sid))
                pending -= 1
            put_schedule(sid.encode(), value)
            if record.state is State.SCHEDULED:
                put_due(due_key(shard, record.due_ms, sid), b"")
                pending += 1
            staged[sid] = record
            applied.append(record)
        if applied:
            batch.put(SCHEDULE_CF, _pending_key(shard), pending.to_bytes(8, "big", signed=True))
        return applied

    def stage_followed(
        self, batch: Batch, shard: int, records: Sequence[Schedule], encoded: Sequence[bytes]
    ) -> None:
        """`stage` for a reading at the topic's head whose records are each a new id's
        `scheduled` one or a pending id's `delivered` one (`ScheduleFollower`): no state to look
        up or compare, only the writes. A second `delivered` of an id in the same poll changes
        nothing, as in `stage`."""
        pending = self.count_pending(shard)
        delivered: set[str] = set()
        put_schedule, put_due = batch.putter(SCHEDULE_CF), batch.putter(DUE_CF)
        for record, value in zip(records, encoded, strict=True):
            sid = record.schedule_id
            key = due_key(shard, record.due_ms, sid)
            if record.state is State.SCHEDULED:
                put_due(key, b"")
                pending += 1
            elif sid in delivered:
                continue
            else:
                delivered.add(sid)
                batch.delete(DUE_CF, key)
                pending -= 1
            put_schedule(sid.encode(), value)
        if records:
            batch.put(SCHEDULE_CF, _pending_key(shard), pending.to_bytes(8, "big", signed=True))

    def pending_at(self, shard: int, entries: Sequence[tuple[int, str]]) -> list[bool]:
        """Whether each (due_ms, id) of `shard` has its due entry: one multi-get."""
        keys = [due_key(shard, due_ms, schedule_id) for due_ms, schedule_id in entries]
        return [entry is not None for entry in self.store(shard).get_many(DUE_CF, keys)]

    def due_between(self, shard: int, start_ms: int, stop_ms: int) -> Iterator[tuple[int, str]]:
        """(due_ms, id) of `shard`'s pending schedules with start <= due < stop, in due order."""
        prefix = shard.to_bytes(2, "big")
        start = prefix + max(start_ms, 0).to_bytes(8, "big")
        for key, _ in self.store(shard).scan(DUE_CF, start, prefix + stop_ms.to_bytes(8, "big")):
            yield int.from_bytes(key[2:10], "big"), key[10:].decode()

    def count_pending(self, shard: int | None = None) -> int:
        """Pending schedules of one shard, or of all of them."""
        shards = range(self.shards.shards) if shard is None else [shard]
        total = 0
        for one in shards:
            data = self.store(one).get(SCHEDULE_CF, _pending_key(one))
            total += 0 if data is None else int.from_bytes(data, "big", signed=True)
        return total
