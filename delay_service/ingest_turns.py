"""Turns at ingest for the delay leaders of one worker: one shard ingests at a time.

Each shard's delay leader is a thread, and a worker's threads share one GIL. When every shard
had buffer records waiting, all of them ingested at once: a step's 1,000 records took each
thread 8 times as long with 8 shards (279 ms at p50 against 74 with 2), and a shard's due
schedules waited for the end of that step. With turns, the shard
holding the turn ingests at the speed of one thread while the others only dispatch what comes
due and commit, which takes them little CPU.

A shard that has read records but may not ingest yet holds them and queues; turns go in the
order asked, so every shard with a backlog gets one. The turn is given back before the holder's
commit: the next shard ingests while it waits on the broker.
"""

from __future__ import annotations

import threading
from collections import deque


class IngestTurns:
    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._holder: int | None = None
        self._queue: deque[int] = deque()  # shards holding records, in the order they asked

    def take(self, shard: int) -> bool:
        """The turn for `shard` if it is free and no shard asked before it; else queue it."""
        with self._changed:
            if self._holder == shard:
                return True
            if self._could_take(shard):
                self._holder = shard
                if self._queue:
                    self._queue.popleft()
                return True
            if shard not in self._queue:
                self._queue.append(shard)
            return False

    def give_back(self, shard: int) -> None:
        """End `shard`'s turn, or its place in the queue (a leader that closes)."""
        with self._changed:
            if self._holder == shard:
                self._holder = None
            elif shard in self._queue:
                self._queue.remove(shard)
            self._changed.notify_all()

    def wait(self, shard: int, timeout_s: float) -> None:
        """Sleep until `shard` could take the turn, or `timeout_s` (its next timer) passes."""
        with self._changed:
            self._changed.wait_for(lambda: self._could_take(shard), timeout_s)

    def _could_take(self, shard: int) -> bool:
        return self._holder is None and (not self._queue or self._queue[0] == shard)
