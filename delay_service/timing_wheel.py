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

Design (mirrors Kafka's ``SystemTimer`` / ``TimingWheel`` / ``TimerTaskList``; this module is the
timer, ``delay_service.wheel_levels`` the wheel's parts, ``delay_service.due_queues`` the queues):

* ``Wheel`` is a ring of ``wheel_size`` buckets, each covering ``tick_ms`` of time.  Entries too
  far in the future for a wheel go to its lazily created *overflow* wheel whose tick is the whole
  span of the finer wheel, so a handful of levels cover centuries (512**5 ms ~ 1,100 years).
* ``Bucket`` is a dict ``schedule_id -> order key``: O(1) add and remove.  ``remove()`` finds the
  bucket without storing where an entry is: an entry on a wheel sits in slot
  ``(due_ms // tick_ms) % wheel_size`` of one level, so it probes that slot on each level.
* ``DelayQueue`` is a ``heapq`` of *buckets* (not entries) keyed by bucket expiration.  The clock
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

import itertools
import operator

from delay_service.due_queues import SEQ_BITS, LateHeap, ReadyQueue
from delay_service.wheel_levels import DelayQueue, Wheel

__all__ = ["TimingWheelTimer"]


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
        self._queue = DelayQueue()
        self._wheel = Wheel(tick_ms, wheel_size, start_ms, self._queue)
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
