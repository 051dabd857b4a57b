"""When the leases of an ordered lane (`revive.key_lane`) end, and when its released messages
may be leased again.

Two heaps, as Kafka's timer keeps its buckets: (deadline, offset, checkpoint id) of leases and
(available at, offset) of releases. An entry is never taken out when its lease changes or
ends: it is skipped lazily once the offset's slot no longer matches it.
"""

from __future__ import annotations

import heapq

from revive.key_lane_slots import Slot, State


class LaneTimers:
    def __init__(self, slots: dict[int, Slot]) -> None:
        self._slots = slots  # the lane's: read here, and marked `reported` by `expired`
        self._deadlines: list[tuple[int, int, int]] = []
        self._releases: list[tuple[int, int]] = []

    def lease_ends(self, deadline_ms: int, offset: int, checkpoint_id: int) -> None:
        heapq.heappush(self._deadlines, (deadline_ms, offset, checkpoint_id))

    def released(self, available_at_ms: int, offset: int) -> None:
        heapq.heappush(self._releases, (available_at_ms, offset))

    def clear(self) -> None:
        self._deadlines, self._releases = [], []

    def next_deadline_ms(self) -> int | None:
        """When the next lease not reported yet ends (None: no lease is open)."""
        deadlines = self._deadlines
        while deadlines and not self._holds(deadlines[0]):
            heapq.heappop(deadlines)
        return deadlines[0][0] if deadlines else None

    def next_available_ms(self, now_ms: int) -> int | None:
        """When a released message may be leased next, if later than now."""
        releases = self._releases
        while releases:
            at, offset = releases[0]
            slot = self._slots.get(offset)
            waiting = slot is not None and slot.state is State.AVAILABLE
            if waiting and slot.available_at_ms == at and at > now_ms:
                return at
            heapq.heappop(releases)
        return None

    def expired(self, now_ms: int) -> list[tuple[int, int, int]]:
        """(checkpoint id, offset, delivery count) of leases past their deadline, each once."""
        due = []
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now_ms:
            entry = heapq.heappop(deadlines)
            if self._holds(entry):
                deadline, offset, checkpoint_id = entry
                slot = self._slots[offset]
                slot.reported = True
                due.append((deadline, checkpoint_id, offset, slot.deliveries))
        return [(cp, offset, count) for _, cp, offset, count in sorted(due)]

    def _holds(self, entry: tuple[int, int, int]) -> bool:
        """Is a deadline entry still a lease's, unreported and not changed since?"""
        deadline, offset, checkpoint_id = entry
        slot = self._slots.get(offset)
        return (
            slot is not None
            and slot.state is State.LEASED
            and slot.checkpoint_id == checkpoint_id
            and slot.deadline_ms == deadline
            and not slot.reported
        )
