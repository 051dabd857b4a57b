"""A pop service's requests, handed over from HTTP handlers, and what wakes its thread.

Handlers on any thread queue a request with the future they wait on; the service thread takes
every request that arrived meanwhile in one step (`PopService.step`). Between steps the thread
blocks until a request comes, a wake (a long poll parks, an inherited group's fetcher is ready,
a stop), a record arrives for a parked poll (`revive.arrivals` names it), or the service's next
deadline (`revive.wake_times`).
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from typing import Any

from revive.requests import Request

# A record the watch saw that the fetcher has not handed over yet (a fetcher just made) is
# looked for again soon (`revive.wake_times`), for this long at most.
ARRIVAL_GIVE_UP_S = 5.0
WAKE: tuple[Any, Any] = (None, None)  # queued by `wake`: a step, with nothing to answer
# (group, topic, partition) -> the highest offset the arrival watch saw there
Arrivals = dict[tuple[str, str, int], int]


class RequestInbox:
    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[Request, Future[Any]]] = queue.SimpleQueue()
        self._arrivals: Arrivals = {}
        self._lock = threading.Lock()
        self._behind: dict[tuple[str, str, int], tuple[int, float]] = {}  # (offset, since)

    # -- any thread ------------------------------------------------------------------------

    def submit(self, request: Request) -> Future[Any]:
        future: Future[Any] = Future()
        self._queue.put((request, future))
        return future

    def wake(self) -> None:
        """Step now: a long poll parks, a group's fetcher is ready, the role is to stop."""
        self._queue.put(WAKE)

    def arrived(self, seen: Arrivals) -> None:
        """Records came for parked polls (the arrival watch): the service fetches until its
        fetchers have them."""
        with self._lock:
            for lane, offset in seen.items():
                if offset > self._arrivals.get(lane, -1):
                    self._arrivals[lane] = offset
        self._queue.put(WAKE)

    # -- the service thread ----------------------------------------------------------------

    def take_arrivals(self) -> tuple[Arrivals, bool]:
        """What the watch saw since, with what the fetchers had not handed over last time; and
        whether it saw anything since (worth a wait for the fetchers' copies)."""
        with self._lock:
            arrivals, self._arrivals = self._arrivals, {}
        now = time.monotonic()
        for lane, offset in arrivals.items():
            old = self._behind.get(lane)
            self._behind[lane] = (offset, now) if old is None else (max(offset, old[0]), old[1])
        return {lane: offset for lane, (offset, _) in self._behind.items()}, bool(arrivals)

    def still_behind(self, lanes: set[tuple[str, str, int]]) -> None:
        """Of the arrivals taken, the fetchers have not handed these over: look again soon,
        up to ARRIVAL_GIVE_UP_S after they were first looked for."""
        now = time.monotonic()
        self._behind = {
            lane: seen
            for lane, seen in self._behind.items()
            if lane in lanes and now - seen[1] < ARRIVAL_GIVE_UP_S
        }

    def looking(self) -> bool:
        """Are records the watch saw still to come from the fetchers?"""
        return bool(self._behind)

    def drain(self, wait_s: float | None) -> list[tuple[Request, Future[Any]]]:
        """Every request queued, after waiting for one up to `wait_s` (None: until one comes;
        0: not at all)."""
        items = []
        try:
            if wait_s is None or wait_s > 0:
                items.append(self._queue.get(timeout=wait_s))
            while True:
                items.append(self._queue.get_nowait())
        except queue.Empty:
            pass
        return [item for item in items if item is not WAKE]
