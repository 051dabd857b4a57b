"""Hierarchical timing wheel with a millisecond tick (after Kafka's ``SystemTimer``).

The delay service keeps every pending schedule's payload in RocksDB; in memory it only needs to
know *which* schedule id is due *when*.  This module holds exactly that: ``(schedule_id, due_ms)``
pairs, with O(1) insert and cancel, and hands them back in due order once the clock passes them.

No object per entry is tracked by the garbage collector.  An entry is a schedule id (a ``str``)
and one ``int``, its *order key* ``due_ms << SEQ_BITS | seq`` (``seq`` is a global insertion
counter), so comparing keys orders by due time, then insertion.  Strs and ints are not GC objects,
and CPython never tracks a dict whose keys and values are all untracked, so the entries live in a
bounded number of containers (per-bucket dicts, an index dict, two deques, a heap list) and a full
collection costs the same with ten entries or a million.  An object per entry (as this module once
had) made full collections scan every pending schedule and showed up as delivery lateness.

Design (mirrors Kafka's ``SystemTimer`` / ``TimingWheel`` / ``TimerTaskList``):

* ``_Wheel`` is a ring of ``wheel_size`` buckets, each covering ``tick_ms`` of time.  Entries too
  far in the future for a wheel go to its lazily created *overflow* wheel whose tick is the whole
  span of the finer wheel, so a handful of levels cover centuries (512**5 ms ~ 1,100 years).
* ``_Bucket`` is a dict ``schedule_id -> order key``: O(1) add and remove.  ``remove()`` finds the
  bucket without storing where an entry is: an entry on a wheel sits in slot
  ``(due_ms // tick_ms) % wheel_size`` of one level, so it probes that slot on each level.
* ``_DelayQueue`` is a ``heapq`` of *buckets* (not entries) keyed by bucket expiration.  The clock
  only moves when a bucket expires, so the cost of ``advance()`` is proportional to the number of
  non-empty buckets passed, not to elapsed milliseconds.  When an overflow bucket expires its
  entries are re-inserted and land in a finer wheel (or are due).
* ``ReadyQueue`` holds expired entries, already sorted by order key, as two parallel deques (keys,
  ids): a 100k-entry burst is sorted once and then drained in ``limit``-sized chunks with O(1)
  pops.  Entries added when already past due go to ``LateHeap``, a heap of keys that is merged
  with the ready queue while draining, so every ``advance()`` result is sorted.
* Cancelling an entry that already sits in the ready queue / late heap is lazy: the index
  (``schedule_id -> order key``) no longer holds that key (keys are unique), so it is skipped.

Unlike Kafka, the lowest wheel never fires early: Kafka runs a task once its bucket expires, which
for ``tick_ms > 1`` can be up to ``tick_ms - 1`` early.  Here an expired entry waits in the ready
queue until ``now_ms >= due_ms``; with the default 1 ms tick the bucket time *is* the due time.
"""

from __future__ import annotations

import heapq
import itertools
import operator

from delay_service.due_queues import SEQ_BITS, LateHeap, ReadyQueue

__all__ = ["TimingWheelTimer"]


class _Bucket:
    """A slot of a wheel: the entries whose due time falls into one tick of that wheel."""

    __slots__ = ("entries", "expiration_ms", "tick_ms")

    def __init__(self, tick_ms: int) -> None:
        self.entries: dict[str, int] = {}  # schedule_id -> order key
        self.tick_ms = tick_ms  # the span of due times it holds: [expiration_ms, + tick_ms)
        # Start of the time range this bucket currently stands for; -1 while unused.  Buckets are
        # reused as the wheel turns, so the expiration changes; a change means "push me on the
        # delay queue again" (exactly like Kafka's TimerTaskList.setExpiration).
        self.expiration_ms = -1

    def set_expiration(self, expiration_ms: int) -> bool:
        """Set the expiration; True if it changed (the caller must then enqueue the bucket)."""
        changed = self.expiration_ms != expiration_ms
        self.expiration_ms = expiration_ms
        return changed

    def flush(self) -> dict[str, int]:
        """Empty the bucket (it is expiring) and hand back its entries for re-insertion."""
        entries, self.entries = self.entries, {}
        self.expiration_ms = -1
        return entries


class _DelayQueue:
    """Min-heap of buckets by expiration: drives the clock from one non-empty bucket to the next."""

    __slots__ = ("_heap", "_tiebreak")

    def __init__(self) -> None:
        # (expiration_ms, tiebreak, bucket): the counter keeps heapq from ever comparing buckets.
        # At most one item per bucket, so the heap is bounded by the number of buckets.
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
        self.buckets = [_Bucket(tick_ms) for _ in range(wheel_size)]
        self.queue = queue
        # Created on first need: most deployments never schedule past the first few levels.
        self.overflow: _Wheel | None = None

    def add(self, schedule_id: str, due_ms: int, key: int) -> bool:
        """Place the entry on this wheel or a coarser one; False if it is already expired.

        "Expired" means due before the end of the current tick of the finest wheel: it can no
        longer get a bucket of its own and must go straight to the ready/late queues.
        """
        wheel = self
        while True:
            if due_ms < wheel.current_ms + wheel.tick_ms:
                return False
            if due_ms < wheel.current_ms + wheel.interval_ms:
                virtual_id = due_ms // wheel.tick_ms
                bucket = wheel.buckets[virtual_id % wheel.wheel_size]
                bucket.entries[schedule_id] = key
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

    def discard(self, schedule_id: str, due_ms: int) -> bool:
        """Take the entry off whichever level holds it; False if it is on no wheel.

        Only live entries sit in buckets (a re-add or remove takes the old one off at once), so
        the id found in the slot its due time hashes to on some level is the entry itself.  The
        search starts at the finest level that can hold ``due_ms`` now: an entry never sits finer
        than that, as clocks only move forward.
        """
        wheel: _Wheel | None = self
        while wheel is not None and due_ms >= wheel.current_ms + wheel.interval_ms:
            wheel = wheel.overflow
        while wheel is not None:
            bucket = wheel.buckets[due_ms // wheel.tick_ms % wheel.wheel_size]
            if bucket.entries.pop(schedule_id, None) is not None:
                return True
            wheel = wheel.overflow
        return False

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
        # Authoritative membership: schedule_id -> order key of its live entry.  A (key, id) in
        # the ready queue / late heap whose key the index does not hold is stale and skipped.
        self._index: dict[str, int] = {}
        self._seq = itertools.count()
        self._ready = ReadyQueue()
        self._late = LateHeap()

    # -- public API ---------------------------------------------------------------------------

    def add(self, schedule_id: str, due_ms: int) -> None:
        """Add or re-add ``schedule_id`` to fire at ``due_ms`` (an integer, else TypeError).

        An entry whose ``due_ms`` is already <= the current clock is due immediately (returned by
        the next ``advance()``).  Adding an id that is present replaces it: the new due time wins
        and, for tie-breaking, it counts as inserted now.
        """
        # A float would make an inexact order key: two entries could share one, defeating both
        # the insertion order and the stale-entry check.
        due_ms = operator.index(due_ms)
        old_key = self._index.pop(schedule_id, None)
        if old_key is not None:
            self._wheel.discard(schedule_id, old_key >> SEQ_BITS)
        key = (due_ms << SEQ_BITS) + next(self._seq)
        self._index[schedule_id] = key
        if not self._wheel.add(schedule_id, due_ms, key):
            self._late.push(key, schedule_id)

    def remove(self, schedule_id: str) -> bool:
        """Cancel ``schedule_id`` in O(1); True if it was present."""
        key = self._index.pop(schedule_id, None)
        if key is None:
            return False
        # On a wheel it is unlinked at once; in the ready queue / late heap it is skipped later.
        self._wheel.discard(schedule_id, key >> SEQ_BITS)
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
        keys = (self._ready.head(self._index), self._late.head(self._index))
        candidates = [key >> SEQ_BITS for key in keys if key is not None]
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

    def _expire_buckets(self, now_ms: int) -> None:
        """Flush every bucket expiring at or before ``now_ms`` into the ready queue.

        As in Kafka, the clock jumps to each bucket's expiration before its entries are
        re-inserted, so entries of an expiring overflow bucket cascade into finer wheels (whose
        buckets, if already expired, are popped by this same loop).  Everything that comes out
        expired in one call is sorted once.  Each such batch sorts after everything already in
        the ready queue: earlier batches came from buckets before the previous ``now``, this batch
        from buckets after it, and bucket boundaries are multiples of ``tick_ms``.
        """
        wheel, queue = self._wheel, self._queue
        expired: dict[int, str] = {}  # order key -> schedule_id
        while (bucket := queue.pop_expired(now_ms)) is not None:
            wheel.advance_clock(bucket.expiration_ms)
            entries = bucket.flush()
            if bucket.tick_ms == wheel.tick_ms:
                # A bucket of the finest wheel: the clock is at its start, so all its entries fall
                # in the current tick and are expired; no need to try re-inserting them one by one.
                expired.update(zip(entries.values(), entries, strict=True))
                continue
            for schedule_id, key in entries.items():
                if not wheel.add(schedule_id, key >> SEQ_BITS, key):
                    expired[key] = schedule_id
        wheel.advance_clock(now_ms)
        if expired:
            # Sorting is needed even with a 1 ms tick: one millisecond's entries may come from an
            # overflow bucket (added long ago) and from a finer bucket (added recently).
            self._ready.extend(expired)

    def _drain(self, now_ms: int, limit: int | None) -> list[tuple[int, str]]:
        """Pop up to ``limit`` due entries, merging the ready queue and the late heap in order."""
        out: list[tuple[int, str]] = []
        cap = -1 if limit is None else limit
        ready, late, index = self._ready, self._late, self._index
        due_stop = (now_ms + 1) << SEQ_BITS  # the keys below it are due by now_ms
        while len(out) != cap:
            late_key = late.head(index)
            if late_key is None or late_key >= due_stop:
                ready.take(out, cap, due_stop, index)
                break
            ready.take(out, cap, late_key, index)  # what sorts before the late head goes first
            if len(out) == cap:
                break
            schedule_id = late.pop()
            del index[schedule_id]
            out.append((late_key >> SEQ_BITS, schedule_id))
        return out
