"""Schedule state: the records of the schedules topic and their RocksDB index.

The compacted schedules topic (key = schedule id) is the truth. Each value is one of
  scheduled  {target, due, key, value, headers, enqueued}   the full record to deliver later
  delivered  {target, due, at}                              payload dropped: compaction frees it
  cancelled  {target, due, at, reason}
Delivered and cancelled are terminal: applying an older `scheduled` record after them changes
nothing, so re-reading the topic (restart, failover, rebuild) is always safe.

RocksDB column families:
  schedule  id -> the latest state record (as in the topic)
  due       due_ms (8 bytes, big endian) + id -> b""   only for `scheduled`, ordered by time
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum

import msgpack

from sidecar.store import Batch, Store

SCHEDULE_CF = "schedule"
# Kept beside the ids (which never start with a NUL byte) so followers and a new leader know the
# backlog size without scanning millions of keys.
PENDING_COUNT_KEY = b"\x00pending"
DUE_CF = "due"
COLUMN_FAMILIES = (SCHEDULE_CF, DUE_CF)


class State(StrEnum):
    SCHEDULED = "scheduled"
    DELIVERED = "delivered"
    CANCELLED = "cancelled"


@dataclass(slots=True)
class Schedule:
    schedule_id: str
    state: State
    target: str
    due_ms: int
    key: bytes | None = None
    value: bytes | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    enqueued_ms: int = 0
    at_ms: int | None = None  # when it was delivered or cancelled
    reason: str | None = None

    def encode(self) -> bytes:
        body: dict[str, object] = {
            "s": str(self.state),
            "t": self.target,
            "d": self.due_ms,
            "e": self.enqueued_ms,
        }
        if self.state is State.SCHEDULED:
            body.update(k=self.key, v=self.value, h=[list(h) for h in self.headers])
        else:
            body.update(a=self.at_ms, r=self.reason)
        return msgpack.packb(body, use_bin_type=True)

    @classmethod
    def decode(cls, schedule_id: str, data: bytes) -> Schedule:
        body = msgpack.unpackb(data, raw=False)
        return cls(
            schedule_id=schedule_id,
            state=State(body["s"]),
            target=body["t"],
            due_ms=body["d"],
            key=body.get("k"),
            value=body.get("v"),
            headers=[(str(n), None if v is None else bytes(v)) for n, v in body.get("h") or []],
            enqueued_ms=body.get("e", 0),
            at_ms=body.get("a"),
            reason=body.get("r"),
        )

    def settled(self, state: State, at_ms: int, reason: str | None = None) -> Schedule:
        """The terminal record that replaces this one (no payload)."""
        return Schedule(
            self.schedule_id,
            state,
            self.target,
            self.due_ms,
            enqueued_ms=self.enqueued_ms,
            at_ms=at_ms,
            reason=reason,
        )


def due_key(due_ms: int, schedule_id: str) -> bytes:
    return due_ms.to_bytes(8, "big") + schedule_id.encode()


class ScheduleIndex:
    """Reads and idempotent writes of schedule state in RocksDB."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def get(self, schedule_id: str) -> Schedule | None:
        data = self._store.get(SCHEDULE_CF, schedule_id.encode())
        return None if data is None else Schedule.decode(schedule_id, data)

    def stage(self, batch: Batch, records: Iterable[Schedule]) -> list[Schedule]:
        """Stage `records` (in order) into `batch`; return those that changed state.

        A record that would go backwards is skipped: terminal states are final, and the same id
        scheduled twice keeps the first schedule. Later records see earlier ones of the batch.
        """
        staged: dict[str, Schedule | None] = {}
        applied = []
        pending = self.count_pending()
        for record in records:
            sid = record.schedule_id
            current = staged[sid] if sid in staged else self.get(sid)
            if current is not None and (
                current.state is not State.SCHEDULED or record.state is State.SCHEDULED
            ):
                continue
            if current is not None:
                batch.delete(DUE_CF, due_key(current.due_ms, sid))
                pending -= 1
            batch.put(SCHEDULE_CF, sid.encode(), record.encode())
            if record.state is State.SCHEDULED:
                batch.put(DUE_CF, due_key(record.due_ms, sid), b"")
                pending += 1
            staged[sid] = record
            applied.append(record)
        if applied:
            batch.put(SCHEDULE_CF, PENDING_COUNT_KEY, pending.to_bytes(8, "big", signed=True))
        return applied

    def due_between(self, start_ms: int, stop_ms: int) -> Iterator[tuple[int, str]]:
        """(due_ms, id) of pending schedules with start_ms <= due < stop_ms, in due order."""
        for key, _ in self._store.scan(
            DUE_CF, start_ms.to_bytes(8, "big"), stop_ms.to_bytes(8, "big")
        ):
            yield int.from_bytes(key[:8], "big"), key[8:].decode()

    def count_pending(self) -> int:
        data = self._store.get(SCHEDULE_CF, PENDING_COUNT_KEY)
        return 0 if data is None else int.from_bytes(data, "big", signed=True)
