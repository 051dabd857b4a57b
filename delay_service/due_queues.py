"""The timing wheel's queues of entries past their bucket: what is due, in order key order.

``ReadyQueue`` holds the entries of expired buckets (sorted once per bucket, then drained in
chunks with O(1) pops); ``LateHeap`` holds entries added when already past the wheel's clock.
The timer merges the two heads, so every batch it hands out is in due order. Both drop cancelled
or replaced entries lazily: an entry is live only while the timer's index still maps its id to
its order key (keys are unique). See ``delay_service.timing_wheel`` for the whole design.
"""

from __future__ import annotations

import heapq
from collections import deque

# Order key = due_ms << SEQ_BITS | seq with 0 <= seq < 2**SEQ_BITS: more insertions than a
# process will ever make (584 years at a billion per second), so seq never spills into the due
# time, and ``key >> SEQ_BITS`` is the due time again (shifts are cheaper than * and //).
SEQ_BITS = 64


class ReadyQueue:
    """Entries expired out of the wheels, in order-key order: parallel deques of keys and ids."""

    __slots__ = ("_ids", "_keys")

    def __init__(self) -> None:
        self._keys: deque[int] = deque()
        self._ids: deque[str] = deque()

    def __len__(self) -> int:
        return len(self._keys)

    def extend(self, batch: dict[int, str]) -> None:
        """Append ``order key -> schedule_id`` pairs; all must sort after what is queued."""
        keys = sorted(batch)
        self._keys.extend(keys)
        self._ids.extend([batch[key] for key in keys])

    def head(self, index: dict[str, int]) -> int | None:
        """Key of the first live entry, after discarding cancelled/replaced ones."""
        keys, ids = self._keys, self._ids
        while keys:
            key = keys[0]
            if index.get(ids[0]) == key:
                return key
            keys.popleft()
            ids.popleft()
        return None

    def take(
        self, out: list[tuple[int, str]], cap: int, stop_key: int, index: dict[str, int]
    ) -> None:
        """Move entries with keys below ``stop_key`` to ``out`` until it holds ``cap`` (-1: all).

        Each comes out as ``(due_ms, schedule_id)`` and leaves ``index`` (it is no longer
        pending); stale ones are dropped on the way.
        """
        keys, ids = self._keys, self._ids
        while keys and keys[0] < stop_key and len(out) != cap:
            key = keys.popleft()
            schedule_id = ids.popleft()
            if index.get(schedule_id) == key:
                del index[schedule_id]
                out.append((key >> SEQ_BITS, schedule_id))


class LateHeap:
    """Entries added when already past the wheel's current tick: a heap of order keys."""

    __slots__ = ("_ids", "_keys")

    def __init__(self) -> None:
        self._keys: list[int] = []
        self._ids: dict[int, str] = {}  # order key -> schedule_id (keys are unique)

    def __len__(self) -> int:
        return len(self._keys)

    def push(self, key: int, schedule_id: str) -> None:
        heapq.heappush(self._keys, key)
        self._ids[key] = schedule_id

    def head(self, index: dict[str, int]) -> int | None:
        """Key of the first live entry, after discarding cancelled/replaced ones."""
        keys, ids = self._keys, self._ids
        while keys:
            key = keys[0]
            if index.get(ids[key]) == key:
                return key
            del ids[heapq.heappop(keys)]
        return None

    def pop(self) -> str:
        """Remove the head (the entry ``head()`` just returned) and give its id."""
        return self._ids.pop(heapq.heappop(self._keys))
