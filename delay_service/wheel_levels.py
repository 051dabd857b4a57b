"""The parts of the timing wheel (`delay_service.timing_wheel`), as Kafka's `TimerTaskList`,
`DelayQueue` and `TimingWheel`: a bucket of entries, the queue of buckets by expiration, and one
level of the hierarchy with its lazily made overflow level.
"""

from __future__ import annotations

import heapq
import itertools


class Bucket:
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


class DelayQueue:
    """Min-heap of buckets by expiration: drives the clock from one non-empty bucket to the next."""

    __slots__ = ("_heap", "_tiebreak")

    def __init__(self) -> None:
        # (expiration_ms, tiebreak, bucket): the counter keeps heapq from ever comparing buckets.
        # At most one item per bucket, so the heap is bounded by the number of buckets.
        self._heap: list[tuple[int, int, Bucket]] = []
        self._tiebreak = itertools.count()

    def push(self, bucket: Bucket) -> None:
        heapq.heappush(self._heap, (bucket.expiration_ms, next(self._tiebreak), bucket))

    def pop_expired(self, now_ms: int) -> Bucket | None:
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


class Wheel:
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

    def __init__(self, tick_ms: int, wheel_size: int, start_ms: int, queue: DelayQueue) -> None:
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval_ms = tick_ms * wheel_size
        # Rounded down to a tick so bucket boundaries are multiples of tick_ms on every level.
        self.current_ms = start_ms - start_ms % tick_ms
        self.buckets = [Bucket(tick_ms) for _ in range(wheel_size)]
        self.queue = queue
        # Created on first need: most deployments never schedule past the first few levels.
        self.overflow: Wheel | None = None

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
                wheel.overflow = Wheel(
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
        wheel: Wheel | None = self
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
        wheel: Wheel | None = self
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
