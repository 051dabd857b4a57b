"""A delay leader's window: the shard's schedules due within `WINDOW_MS`, in a timing wheel,
with as many of their payloads held in memory as the budget allows.

The rest stay on disk and are range-scanned in as the window slides, so memory does not grow
with far-future backlog. A schedule ingested inside the window goes into the wheel at once; one
due later comes in with the slide that reaches it. The window knows the earliest due time on disk
beyond it (a lower bound: cancels and deliveries may have taken that one), so it slides only when
that one nears: with nothing on disk before the horizon, the window moves along without a read,
and an idle leader has no slide to wake for.
"""

from __future__ import annotations

from delay_service.schedules import Schedule, ScheduleIndex, State
from delay_service.timing_wheel import TimingWheelTimer
from delay_service.window_payloads import WindowPayloads
from foundation.clock import now_ms

WINDOW_MS = 10_000  # how far ahead the wheel holds schedules
# The window slides in small steps: loading half a window at once (tens of thousands of entries
# at a high due rate) stalled dispatch for that long and showed in the p99 lateness.
SLIDE_MS = 250
# The window's schedules held in memory per shard (`delay_service.window_payloads`): 5k due/s of
# 300-byte records over a 10 s window take about 25 MB, split across the shards of the load.
WINDOW_PAYLOAD_BYTES = 16 * 1024 * 1024
PAYLOAD_READ_CHUNK = 1000  # ids per multi-get when the window slides


class DueWindow:
    def __init__(self, index: ScheduleIndex, shard: int) -> None:
        self._index, self._shard = index, shard
        self.wheel = TimingWheelTimer(now_ms())
        self.payloads = WindowPayloads(WINDOW_PAYLOAD_BYTES)
        self.loaded_until = 0  # due times before it are in the wheel (those still pending)
        # No pending schedule on disk is due in [loaded_until, this); None: none at all. Never
        # below `loaded_until`: the window moves along only up to it.
        self._next_on_disk: int | None = 0

    def add(self, schedule_id: str, due_ms: int) -> None:
        """A schedule just ingested: into the wheel if due within the window loaded."""
        if due_ms < self.loaded_until:  # later ones are loaded from RocksDB as the window slides
            self.wheel.add(schedule_id, due_ms)
        elif self._next_on_disk is None or due_ms < self._next_on_disk:
            self._next_on_disk = due_ms

    def applied(self, schedules: list[Schedule]) -> None:
        """A step's schedules are committed and indexed (`WindowPayloads.applied`)."""
        self.payloads.applied(schedules, self.loaded_until)

    def refill(self, now: int) -> None:
        """Slide, if a schedule on disk nears: load those due before now + WINDOW_MS from
        RocksDB. Else the window moves along to the nearest one on disk, with no read."""
        slide = self.next_slide_ms()
        if slide is None or now < slide:
            nearest = self._next_on_disk
            reach = now + WINDOW_MS if nearest is None else min(now + WINDOW_MS, nearest)
            self.loaded_until = max(self.loaded_until, reach)
            return
        horizon = now + WINDOW_MS
        ids = []
        for due_ms, schedule_id in self._index.due_between(self._shard, self.loaded_until, horizon):
            self.wheel.add(schedule_id, due_ms)
            ids.append(schedule_id)
        self.loaded_until = horizon
        later = next(iter(self._index.due_between(self._shard, horizon, 2**63 - 1)), None)
        self._next_on_disk = None if later is None else later[0]
        self._hold(ids)

    def next_slide_ms(self) -> int | None:
        """When the window slides next, SLIDE_MS after the last slide at the soonest (the
        leader's step waits no longer); None: nothing on disk to load."""
        if self._next_on_disk is None:
            return None
        return self._next_on_disk - WINDOW_MS + SLIDE_MS

    def _hold(self, ids: list[str]) -> None:
        """Hold the schedules that just entered the window, until the budget is spent."""
        for start in range(0, len(ids), PAYLOAD_READ_CHUNK):
            chunk = ids[start : start + PAYLOAD_READ_CHUNK]
            for schedule in self._index.get_many(self._shard, chunk):
                if schedule is None or schedule.state is not State.SCHEDULED:
                    continue  # the due family lists pending ids only: a guard, not a case
                if not self.payloads.hold(schedule):
                    return
