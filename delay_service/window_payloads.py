"""The schedules due inside the wheel's window, held in memory so a due delivery reads no disk.

The wheel holds ids only, and a delivery needs the whole schedule (target, key, value, headers).
Read from RocksDB when it comes due, that read and its decode sat on the due path. The leader
holds the schedules of its window instead: kept from the step that wrote them, or loaded in one
multi-get as the window slides (`SLIDE_MS` ahead of the first of them coming due). A due delivery
then costs a produce and its share of a commit.

What is held is exactly the committed index: it changes only after a step commits, with the
records that step applied, never with those of a step that may still abort. Only this shard's
leader writes its ids, so nothing else can make an entry stale. It is bounded by bytes: past the
budget a schedule is not held, and its delivery reads RocksDB as before, so a burst of due
schedules costs no more memory than the budget.
"""

from __future__ import annotations

from collections.abc import Iterable

from delay_service.schedules import Schedule, State
from foundation.record_size import record_bytes

ENTRY_OVERHEAD_BYTES = 200  # the struct, its dict slot and the id string, roughly


def held_bytes(schedule: Schedule) -> int:
    """What holding `schedule` costs, counted the same way when it is held and dropped."""
    record = record_bytes(schedule.key, schedule.value, schedule.headers)
    return ENTRY_OVERHEAD_BYTES + len(schedule.schedule_id) + record


class WindowPayloads:
    def __init__(self, budget_bytes: int) -> None:
        self._budget = budget_bytes
        self._held: dict[str, Schedule] = {}
        self._sizes: dict[str, int] = {}  # held_bytes of each held schedule, counted once
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._held)

    def get(self, schedule_id: str) -> Schedule | None:
        """The id's schedule if it is held; None says nothing (the index has the answer)."""
        return self._held.get(schedule_id)

    def hold(self, schedule: Schedule) -> bool:
        """Hold a pending schedule if the budget allows; False if it does not."""
        if schedule.state is not State.SCHEDULED:
            raise ValueError(f"only pending schedules are held, not {schedule.state}")
        self.drop(schedule.schedule_id)
        size = held_bytes(schedule)
        if self.bytes + size > self._budget:
            return False
        self._held[schedule.schedule_id] = schedule
        self._sizes[schedule.schedule_id] = size
        self.bytes += size
        return True

    def drop(self, schedule_id: str) -> None:
        size = self._sizes.pop(schedule_id, None)
        if size is not None:
            del self._held[schedule_id]
            self.bytes -= size

    def applied(self, records: Iterable[Schedule], window_end_ms: int) -> None:
        """A step committed these records (in order): hold the pending ones due in the window,
        drop every other id they name (delivered, cancelled, or due beyond the window)."""
        for record in records:
            if record.state is State.SCHEDULED and record.due_ms < window_end_ms:
                self.hold(record)
            elif record.schedule_id in self._sizes:  # most ids were never held: no call
                self.drop(record.schedule_id)
