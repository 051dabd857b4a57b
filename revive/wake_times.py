"""When a pop service's thread must wake with no request to serve: its deadlines.

A lease ending (it is revived then: available again at once), a group's offsets due
(`revive.offsets`), and a look at the replay floors, due FLOOR_EVERY_S after the ledgers or the
offsets sent changed and never else: an idle shard has no deadline and sleeps until a request
or a wake comes. While the arrival watch has named records the fetchers have not handed over
yet, the thread looks again soon; while long polls park, at least every PARKED_LOOK_S (the watch
reports what arrives: this bounds only an arrival it missed, its consumer failing).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from foundation.clock import now_ms

# Replay floors and never-committed watermarks are looked for this long after a change to the
# ledgers or the offsets sent (each look scans the ledgers).
FLOOR_EVERY_S = 1.0
PARKED_LOOK_S = 5.0  # while long polls park: the bound of an arrival the watch did not report
ARRIVAL_RETRY_S = 0.005  # a record the watch saw, not yet handed over by the fetcher


class WakeTimes:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._looked_at = 0.0  # when floors and unsent watermarks were last looked for
        self._floors_due: float | None = 0.0  # None: nothing changed since the last look
        self.expiry_ms: int | None = None  # when the next lease may end (epoch ms)

    def floors_may_move(self) -> None:
        """The ledgers or the offsets sent changed: look at the floors when next due."""
        if self._floors_due is None:
            self._floors_due = self._looked_at + FLOOR_EVERY_S

    def look_at_floors(self) -> bool:
        """Is a look at the floors due now? (It counts as done.)"""
        now = self._clock()
        if self._floors_due is None or now < self._floors_due:
            return False
        self._looked_at, self._floors_due = now, None
        return True

    def wait_s(
        self, offsets_due: float | None, arrivals_behind: bool, polls_parked: bool
    ) -> float | None:
        """Until the soonest deadline (`offsets_due` on the same clock); None: nothing is due."""
        now = self._clock()
        deadlines = [offsets_due, self._floors_due]
        if self.expiry_ms is not None:
            deadlines.append(now + (self.expiry_ms - now_ms()) / 1000)
        if arrivals_behind:
            deadlines.append(now + ARRIVAL_RETRY_S)
        elif polls_parked:
            deadlines.append(now + PARKED_LOOK_S)
        soonest = min((d for d in deadlines if d is not None), default=None)
        return None if soonest is None else max(soonest - now, 0.0)
