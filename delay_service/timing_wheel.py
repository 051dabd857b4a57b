"""Hierarchical timing wheel with a millisecond tick (after Kafka's ``SystemTimer``).

The delay service keeps every pending schedule's payload in RocksDB; in memory it only needs to
know *which* schedule id is due *when*.  This module holds exactly that: ``(schedule_id, due_ms)``
pairs, with O(1) insert and cancel, and hands them back in due order once the clock passes them.

Design (mirrors Kafka's ``SystemTimer`` / ``TimingWheel`` / ``TimerTaskList``):

* ``_Wheel`` is a ring of ``wheel_size`` buckets, each covering ``tick_ms`` of time.  Entries too
  far in the future for a wheel go to its lazily created *overflow* wheel whose tick is the whole
  span of the finer wheel, so a handful of levels cover centuries (512**5 ms ~ 1,100 years).
* ``_Bucket`` is a dict ``schedule_id -> _Entry``: O(1) add and remove, and every entry knows its
  bucket, so ``remove()`` never searches.
* ``_DelayQueue`` is a ``heapq`` of *buckets* (not entries) keyed by bucket expiration.  The clock
  only moves when a bucket expires, so the cost of ``advance()`` is proportional to the number of
  non-empty buckets passed, not to elapsed milliseconds.  When an overflow bucket expires its
  entries are re-inserted and land in a finer wheel (or are due).
* Expired entries go to a *ready* deque, already sorted by ``(due_ms, seq)``, so a 100k-entry
  burst is sorted once and then drained in ``limit``-sized chunks with O(1) pops (no quadratic
  re-slicing).  Entries added when already past due go to a small *late* heap that is merged with
  the ready deque while draining, so every ``advance()`` result is sorted.
* Cancelling an entry that already sits in the ready deque / late heap is lazy: the index
  (``schedule_id -> _Entry``) no longer points at that entry object, so it is skipped when popped.

Unlike Kafka, the lowest wheel never fires early: Kafka runs a task once its bucket expires, which
for ``tick_ms > 1`` can be up to ``tick_ms - 1`` early.  Here an expired entry waits in the ready
deque until ``now_ms >= due_ms``; with the default 1 ms tick the bucket time *is* the due time.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque

__all__ = ["TimingWheelTimer"]


class _Entry:
    """One pending schedule.  ``seq`` is a global insertion counter used to break due-time ties."""

    __slots__ = ("bucket", "due_ms", "schedule_id", "seq")

    def __init__(self, schedule_id: str, due_ms: int, seq: int) -> None:
        self.schedule_id = schedule_id
        self.due_ms = due_ms
        self.seq = seq
        # The bucket currently holding the entry; None once it has expired out of the wheels
        # (then it lives in the ready deque or the late heap).
        self.bucket: _Bucket | None = None


def _order_key(entry: _Entry) -> tuple[int, int]:
    """Delivery order: due time first, insertion order among equal due times."""
    return (entry.due_ms, entry.seq)


class _Bucket:
    """A slot of a wheel: the entries whose due time falls into one tick of that wheel."""

    __slots__ = ("entries", "expiration_ms")

    def __init__(self) -> None:
        self.entries: dict[str, _Entry] = {}
        # Start of the time range this bucket currently stands for; -1 while unused.  Buckets are
        # reused as the wheel turns, so the expiration changes; a change means "push me on the
        # delay queue again" (exactly like Kafka's TimerTaskList.setExpiration).
        self.expiration_ms = -1

    def set_expiration(self, expiration_ms: int) -> bool:
        """Set the expiration; True if it changed (the caller must then enqueue the bucket)."""
        changed = self.expiration_ms != expiration_ms
        self.expiration_ms = expiration_ms
        return changed

    def add(self, entry: _Entry) -> None:
        self.entries[entry.schedule_id] = entry
        entry.bucket = self

    def remove(self, entry: _Entry) -> None:
        del self.entries[entry.schedule_id]
        entry.bucket = None

    def flush(self) -> list[_Entry]:
        """Empty the bucket (it is expiring) and hand back its entries for re-insertion."""
        entries = list(self.entries.values())
        self.entries = {}
        self.expiration_ms = -1
        for entry in entries:
            entry.bucket = None
        return entries


class _DelayQueue:
    """Min-heap of buckets by expiration: drives the clock from one non-empty bucket to the next."""

    __slots__ = ("_heap", "_tiebreak")

    def __init__(self) -> None:
        # (expiration_ms, tiebreak, bucket): the counter keeps heapq from ever comparing buckets.
        self._heap: list[tuple[int, int, _Bucket]] = []
        self._tiebreak = itertools.count()

    def push(self, bucket: _Bucket) -> None:
        heapq.heappush(self._heap, (bucket.expiration_ms, next(self._tiebreak), bucket))

    def pop_expired(self, now_ms: int) -> _Bucket | None:
        """Pop the earliest bucket if it has expired by ``now_ms``, else None."""
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            expiration_ms, _, bucket = heapq.heappop(heap)
            # Defensive: skip a heap item that no longer matches the bucket's expiration.  By
            # construction a bucket is only re-pushed after it has been popped, so this is rare.
            if bucket.expiration_ms == expiration_ms:
                return bucket
        return None

    def peek_expiration(self) -> int | None:
        """Earliest expiration of a non-empty bucket.

        Buckets emptied by ``remove()`` stay in the heap (removal is O(1), no heap surgery); they
        are discarded here so a caller does not wake up for nothing.  Resetting the expiration to
        -1 makes a later add into that slot re-push the bucket.
        """
        heap = self._heap
        while heap:
            expiration_ms, _, bucket = heap[0]
            if bucket.expiration_ms == expiration_ms and bucket.entries:
                return expiration_ms
            heapq.heappop(heap)
            if bucket.expiration_ms == expiration_ms:
                bucket.expiration_ms = -1
        return None


class _Wheel:
    """One level of the hierarchy: ``wheel_size`` buckets of ``tick_ms`` each."""

    __slots__ = (
        "buckets",
        "current_ms",
        "interval_ms",
        "overflow",
        "queue",
        "tick_ms",
        "wheel_size",
    )

    def __init__(self, tick_ms: int, wheel_size: int, start_ms: int, queue: _DelayQueue) -> None:
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval_ms = tick_ms * wheel_size
        # Rounded down to a tick so bucket boundaries are multiples of tick_ms on every level.
        self.current_ms = start_ms - start_ms % tick_ms
        self.buckets = [_Bucket() for _ in range(wheel_size)]
        self.queue = queue
        # Created on first need: most deployments never schedule past the first few levels.
        self.overflow: _Wheel | None = None

    def add(self, entry: _Entry) -> bool:
        """Place ``entry`` on this wheel or a coarser one; False if it is already expired.

        "Expired" means due before the end of the current tick of the finest wheel: it can no
        longer get a bucket of its own and must go straight to the ready/late queues.
        """
        wheel = self
        due_ms = entry.due_ms
        while True:
            if due_ms < wheel.current_ms + wheel.tick_ms:
                return False
            if due_ms < wheel.current_ms + wheel.interval_ms:
                virtual_id = due_ms // wheel.tick_ms
                bucket = wheel.buckets[virtual_id % wheel.wheel_size]
                bucket.add(entry)
                if bucket.set_expiration(virtual_id * wheel.tick_ms):
                    wheel.queue.push(bucket)
                return True
            if wheel.overflow is None:
                # The overflow wheel starts at this wheel's current time so that its first bucket
                # lines up with the end of this wheel's span.
                wheel.overflow = _Wheel(
                    wheel.interval_ms, wheel.wheel_size, wheel.current_ms, wheel.queue
                )
            wheel = wheel.overflow

    def advance_clock(self, time_ms: int) -> None:
        """Move this wheel and its overflow wheels forward (never backward) to ``time_ms``.

        Only safe once every bucket with expiration <= ``time_ms`` has been flushed; otherwise a
        new entry could be hashed into a slot whose old contents have not expired yet.
        """
        wheel: _Wheel | None = self
        while wheel is not None and time_ms >= wheel.current_ms + wheel.tick_ms:
            wheel.current_ms = time_ms - time_ms % wheel.tick_ms
            time_ms = wheel.current_ms
            wheel = wheel.overflow

    def levels(self) -> int:
        """Count the wheels created so far (this one plus its overflow wheels)."""
        count, wheel = 1, self.overflow
        while wheel is not None:
            count, wheel = count + 1, wheel.overflow
        return count


class TimingWheelTimer:
    """Hierarchical timing wheel holding ``schedule_id -> due_ms`` with a millisecond tick.

    Not thread-safe: the delay service drives it from a single event loop.  All times are epoch
    milliseconds supplied by the caller, which makes the timer deterministic and easy to test.
    """

    def __init__(self, start_ms: int, tick_ms: int = 1, wheel_size: int = 512) -> None:
        if tick_ms < 1:
            raise ValueError(f"tick_ms must be >= 1, got {tick_ms}")
        if wheel_size < 2:
            raise ValueError(f"wheel_size must be >= 2, got {wheel_size}")
        self._queue = _DelayQueue()
        self._wheel = _Wheel(tick_ms, wheel_size, start_ms, self._queue)
        # Authoritative membership: an entry object is live iff the index points at it.  Entries
        # in the ready deque / late heap that are not the indexed object are stale and skipped.
        self._index: dict[str, _Entry] = {}
        self._seq = itertools.count()
        # Entries expired out of the wheels, sorted by (due_ms, seq); they may still be a little
        # in the future when tick_ms > 1.  New batches always sort after older ones (see advance).
        self._ready: deque[_Entry] = deque()
        # Entries that were added when already past the wheel's current tick; usually tiny.
        self._late: list[tuple[int, int, _Entry]] = []

    # -- public API ---------------------------------------------------------------------------

    def add(self, schedule_id: str, due_ms: int) -> None:
        """Add or re-add ``schedule_id`` to fire at ``due_ms``.

        An entry whose ``due_ms`` is already <= the current clock is due immediately (returned by
        the next ``advance()``).  Adding an id that is present replaces it: the new due time wins
        and, for tie-breaking, it counts as inserted now.
        """
        old = self._index.pop(schedule_id, None)
        if old is not None:
            self._detach(old)
        entry = _Entry(schedule_id, due_ms, next(self._seq))
        self._index[schedule_id] = entry
        if not self._wheel.add(entry):
            heapq.heappush(self._late, (due_ms, entry.seq, entry))

    def remove(self, schedule_id: str) -> bool:
        """Cancel ``schedule_id`` in O(1); True if it was present."""
        entry = self._index.pop(schedule_id, None)
        if entry is None:
            return False
        self._detach(entry)
        return True

    def __contains__(self, schedule_id: object) -> bool:
        return schedule_id in self._index

    def __len__(self) -> int:
        return len(self._index)

    def due_backlog(self) -> int:
        """Entries already due but not yet returned (held back by ``limit``).

        Approximate by the few cancelled entries not yet skipped; good enough for a gauge.
        """
        return len(self._ready) + len(self._late)

    @property
    def clock_ms(self) -> int:
        """Current clock of the finest wheel (the last ``advance`` time, rounded to a tick)."""
        return self._wheel.current_ms

    def next_expiry_ms(self) -> int | None:
        """Earliest time at which ``advance()`` may return something; None when empty.

        That is the due time of the first already-expired entry if there is one (it may be <= the
        clock: "call advance now"), else the expiration of the earliest non-empty bucket.  The
        result is never later than the earliest due entry, but may be earlier when the earliest
        entry sits in a coarse overflow bucket: advancing to it cascades the entry into a finer
        wheel, and the next call returns a tighter time (at most one step per wheel level).
        """
        if not self._index:
            return None
        candidates: list[int] = []
        head = self._peek_ready()
        if head is not None:
            candidates.append(head.due_ms)
        late = self._peek_late()
        if late is not None:
            candidates.append(late.due_ms)
        bucket_ms = self._queue.peek_expiration()
        if bucket_ms is not None:
            candidates.append(bucket_ms)
        return min(candidates) if candidates else None

    def advance(self, now_ms: int, limit: int | None = None) -> list[tuple[int, str]]:
        """Move the clock to ``now_ms`` and return due entries as ``(due_ms, schedule_id)``.

        Results are sorted by due time, then insertion order, and never contain an entry with
        ``due_ms > now_ms``.  With ``limit``, at most ``limit`` entries are returned; the rest stay
        queued and come first on the next call.  Calling with ``now_ms`` below the clock does not
        move the clock back; it only returns entries due by ``now_ms``.
        """
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be >= 0 or None, got {limit}")
        self._expire_buckets(now_ms)
        return self._drain(now_ms, limit)

    # -- internals ----------------------------------------------------------------------------

    def _detach(self, entry: _Entry) -> None:
        # Entries still on a wheel are unlinked from their bucket right away; entries already in
        # the ready deque / late heap are left there and skipped later (see _index).
        if entry.bucket is not None:
            entry.bucket.remove(entry)

    def _expire_buckets(self, now_ms: int) -> None:
        """Flush every bucket expiring at or before ``now_ms`` into the ready deque.

        As in Kafka, the clock jumps to each bucket's expiration before its entries are
        re-inserted, so entries of an expiring overflow bucket cascade into finer wheels (whose
        buckets, if already expired, are popped by this same loop).  Everything that comes out
        expired in one call is sorted once.  Each such batch sorts after everything already in
        the ready deque: earlier batches came from buckets before the previous ``now``, this batch
        from buckets after it, and bucket boundaries are multiples of ``tick_ms``.
        """
        wheel, queue = self._wheel, self._queue
        batch: list[_Entry] = []
        while (bucket := queue.pop_expired(now_ms)) is not None:
            wheel.advance_clock(bucket.expiration_ms)
            for entry in bucket.flush():
                if not wheel.add(entry):
                    batch.append(entry)
        wheel.advance_clock(now_ms)
        if batch:
            # Needed even with a 1 ms tick: one millisecond's entries may come from an overflow
            # bucket (added long ago) and from a finer bucket (added recently) in either order.
            batch.sort(key=_order_key)
            self._ready.extend(batch)

    def _peek_ready(self) -> _Entry | None:
        """Head of the ready deque after discarding cancelled/replaced entries."""
        ready, index = self._ready, self._index
        while ready:
            entry = ready[0]
            if index.get(entry.schedule_id) is entry:
                return entry
            ready.popleft()
        return None

    def _peek_late(self) -> _Entry | None:
        """Head of the late heap after discarding cancelled/replaced entries."""
        late, index = self._late, self._index
        while late:
            entry = late[0][2]
            if index.get(entry.schedule_id) is entry:
                return entry
            heapq.heappop(late)
        return None

    def _drain(self, now_ms: int, limit: int | None) -> list[tuple[int, str]]:
        """Pop up to ``limit`` due entries, merging the ready deque and the late heap in order."""
        out: list[tuple[int, str]] = []
        remaining = -1 if limit is None else limit
        ready, late, index = self._ready, self._late, self._index
        while remaining != 0:
            head = self._peek_ready()
            late_head = self._peek_late() if late else None
            if late_head is not None and (head is None or _order_key(late_head) < _order_key(head)):
                if late_head.due_ms > now_ms:
                    break
                heapq.heappop(late)
                entry = late_head
            else:
                if head is None or head.due_ms > now_ms:
                    break
                ready.popleft()
                entry = head
            del index[entry.schedule_id]
            out.append((entry.due_ms, entry.schedule_id))
            remaining -= 1
        return out
