"""A pop service's requests, handed over from HTTP handlers, and how long its thread waits for
them between steps.

Handlers on any thread queue a request with the future they wait on; the service thread takes
every request that arrived meanwhile in one step (`PopService.step`), waiting briefly first if
none did. The wait is short while a long poll of this worker waits for records (it must wake as
soon as they arrive), long while none does, since a pop moves what was fetched into the lanes
itself, and never past the moment the next lease ends.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from foundation.clock import now_ms
from revive.requests import PopRequest, SettleRequest

# Every idle shard woke 200 times a second: about 0.15 of a core per worker with 8 shards and
# nothing to do (BENCHMARKS.md, 2026-11-25 21:00); 20 times a second, some 0.01 (2026-11-26 10:45).
IDLE_WAIT_S = 0.005
QUIET_WAIT_S = 0.25
# Once `revive.arrivals` saw records come for a long poll, the thread looks this often for a
# moment: the fetcher's own copy of them may come a little after the watch's.
ARRIVAL_WAIT_S = 0.0005
ARRIVAL_LOOK_S = 0.01
Request = PopRequest | SettleRequest
WAKE: tuple[Any, Any] = (None, None)  # queued by `wake`: a step, with nothing to answer


class RequestInbox:
    def __init__(self, awaited: Callable[[], bool]) -> None:
        self._awaited = awaited  # does a long poll of this worker wait for records?
        self._queue: queue.Queue[tuple[Request, Future[Any]]] = queue.Queue()
        self._look_often_until = 0.0  # monotonic; see `arrived`
        self.next_expiry_ms: int | None = None  # when the next lease may end (the thread's)

    # -- any thread ------------------------------------------------------------------------

    def submit(self, request: Request) -> Future[Any]:
        future: Future[Any] = Future()
        self._queue.put((request, future))
        return future

    def wake(self) -> None:
        """A long poll starts waiting: look for records at once, and often from now on."""
        self._queue.put(WAKE)

    def arrived(self) -> None:
        """Records came for a parked long poll: look now, then often for a moment."""
        self._look_often_until = time.monotonic() + ARRIVAL_LOOK_S
        self._queue.put(WAKE)

    # -- the service thread ----------------------------------------------------------------

    def fetched(self) -> None:
        """The fetcher has what the watch saw come, most likely: looking every 0.5 ms for the
        rest of the moment would cost a step each, for every arrival of a trickle."""
        self._look_often_until = 0.0

    def drain(self, block: bool = True) -> list[tuple[Request, Future[Any]]]:
        """Every request queued, after waiting for one (`block`) as long as `_wait_s` says."""
        items = []
        try:
            wait = self._wait_s() if block else 0
            items.append(self._queue.get(timeout=wait) if wait else self._queue.get_nowait())
            while True:
                items.append(self._queue.get_nowait())
        except queue.Empty:
            pass
        return [item for item in items if item is not WAKE]

    def _wait_s(self) -> float:
        if time.monotonic() < self._look_often_until:
            return ARRIVAL_WAIT_S
        return IDLE_WAIT_S if self._awaited() else self._quiet_wait_s()

    def _quiet_wait_s(self) -> float:
        """Until the next lease ends (it is revived then: available again at once), at most
        QUIET_WAIT_S; never 0, which would not wait at all."""
        if self.next_expiry_ms is None:
            return QUIET_WAIT_S
        return min(max((self.next_expiry_ms - now_ms()) / 1000, 0.001), QUIET_WAIT_S)
