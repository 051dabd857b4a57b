"""Per-partition lease bookkeeping for pop consumption (RocketMQ CK/ACK style).

One ``PartitionLedger`` exists per (group, source topic, partition) on the leader. The source
topic is whatever the records were read from: the origin topic or the group's retry topic.

A **checkpoint** is one pop batch from one partition: an id, the sorted offsets it leased
(usually contiguous, gaps allowed), per-offset delivery counts, and a lease deadline. Per offset
it keeps three bits (settled, acked, expiry-reported), and a sparse dict of per-offset deadlines
only for leases that were changed. Contiguous batches store just their first offset, so a leased
message costs a few bytes, never a Python object.

Settling outcomes (``Outcome``): ``ACKED``; ``REQUEUED`` (nacked, or the lease expired, and the
message was copied to the retry topic: this delivery is over); ``DEAD_LETTERED``.

API (``now_ms`` / deadlines are epoch ms; statuses are the strings of DESIGN.md):

* ``open_checkpoint(checkpoint_id, offsets, delivery_counts, deadline_ms)``: record a pop.
  Checkpoint ids and offsets must both increase across calls (pops read a partition in order).
* ``ack(cp, offset, now_ms)`` -> ``acked`` | ``acked_late`` (deadline passed, not yet requeued)
  | ``already_acked`` | ``superseded`` (this delivery was requeued / dead-lettered) | ``invalid``.
* ``settle(cp, offset, outcome)`` for nack / reject / revive -> ``ok`` | ``already_acked`` |
  ``superseded`` | ``invalid``. The revive loop must publish a retry only when this says ``ok``:
  an ack that raced with expiry wins.
* ``change_deadline(cp, offset, deadline_ms, now_ms)`` -> ``ok`` | ``already_acked`` |
  ``superseded`` | ``invalid``. A lease whose deadline has passed cannot be extended (the revive
  loop may already be requeuing it), so that answers ``superseded``.
* ``expired(now_ms)`` -> ``[(cp, offset, delivery_count)]`` of unsettled leases whose deadline
  passed, each reported once; the caller settles them as ``REQUEUED`` or ``DEAD_LETTERED``.
  ``next_deadline_ms()`` says when to look again (a lower bound).
* ``delivery_count(cp, offset)``, ``in_flight()``, ``low_watermark(cursor)`` (the offset to
  commit: smallest leased-but-unsettled offset, else ``cursor``).

Every method is deterministic in its arguments, so replaying the state records (see
``revive.records``) with their timestamps rebuilds the same ledger. Mutations happen in memory
when called; the caller writes the matching record in the same Kafka transaction as its other
effects and answers the client only after the commit. If that write fails the leader must
rebuild its ledgers from Kafka, since memory is then ahead of the log.

Fully settled checkpoints are dropped once the low watermark passes them. A receipt for a
dropped checkpoint answers ``already_acked``, except for the last ``retain_settled`` dropped
checkpoints that requeued or dead-lettered something, which keep answering ``superseded``
exactly for those offsets. Past that bound a late ack of a requeued message reads
``already_acked``: both statuses mean "nothing left to do for this receipt".
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left
from collections import OrderedDict, deque
from collections.abc import Iterator, Sequence
from enum import IntEnum
from itertools import pairwise

ACKED = "acked"
ACKED_LATE = "acked_late"
ALREADY_ACKED = "already_acked"
SUPERSEDED = "superseded"
INVALID = "invalid"
OK = "ok"

MAX_DELIVERY_COUNT = 0xFFFF  # array('H') holds the counts


class Outcome(IntEnum):
    """How one delivery ended; the values are stored in state records, never renumber."""

    ACKED = 1
    REQUEUED = 2
    DEAD_LETTERED = 3


def _bit(bitmap: bytearray, i: int) -> bool:
    return bool(bitmap[i >> 3] & (1 << (i & 7)))


def _set_bit(bitmap: bytearray, i: int) -> None:
    bitmap[i >> 3] |= 1 << (i & 7)


class _Checkpoint:
    """One pop batch: offsets, counts and bitmaps, all sized O(bits) per message."""

    __slots__ = (
        "acked",
        "checkpoint_id",
        "counts",
        "deadline_ms",
        "first",
        "offsets",
        "overrides",
        "reported",
        "requeued_any",
        "scan",
        "settled",
        "size",
        "unsettled",
    )

    def __init__(
        self,
        checkpoint_id: int,
        offsets: Sequence[int],
        counts: Sequence[int],
        deadline_ms: int,
    ) -> None:
        self.checkpoint_id = checkpoint_id
        self.size = len(offsets)
        self.first = offsets[0]
        # None means the contiguous range first .. first+size-1, the common case: no offset array.
        contiguous = offsets[-1] - self.first == self.size - 1
        self.offsets: array[int] | None = None if contiguous else array("q", offsets)
        self.counts = array("H", counts)
        nbytes = (self.size + 7) >> 3
        self.settled = bytearray(nbytes)
        self.acked = bytearray(nbytes)
        # Set once expired() has handed the offset to the revive loop: never reported twice.
        self.reported = bytearray(nbytes)
        self.deadline_ms = deadline_ms
        self.overrides: dict[int, int] | None = None  # offset -> deadline, only extended leases
        self.unsettled = self.size
        self.scan = 0  # every index below this is settled: keeps low_watermark amortised O(1)
        self.requeued_any = False

    def index(self, offset: int) -> int:
        """Index of ``offset`` in this checkpoint, or -1."""
        if self.offsets is None:
            i = offset - self.first
            return i if 0 <= i < self.size else -1
        i = bisect_left(self.offsets, offset)
        return i if i < self.size and self.offsets[i] == offset else -1

    def offset_at(self, i: int) -> int:
        return self.first + i if self.offsets is None else self.offsets[i]

    def deadline_of(self, offset: int) -> int:
        if self.overrides is None:
            return self.deadline_ms
        return self.overrides.get(offset, self.deadline_ms)

    def settled_status(self, i: int) -> str:
        return ALREADY_ACKED if _bit(self.acked, i) else SUPERSEDED

    def first_unsettled(self) -> int:
        while self.scan < self.size and _bit(self.settled, self.scan):
            self.scan += 1
        return self.scan

    def unsettled_indices(self) -> Iterator[int]:
        for i in range(self.first_unsettled(), self.size):
            if not _bit(self.settled, i):
                yield i


class PartitionLedger:
    """Leases of one (group, source topic, partition); see the module docstring."""

    def __init__(self, committed_offset: int, *, retain_settled: int = 1024) -> None:
        if committed_offset < 0:
            raise ValueError(f"committed offset must be >= 0, got {committed_offset}")
        self._next_offset = committed_offset  # first offset never leased; below it all is settled
        self._last_checkpoint_id = -1
        self._live: dict[int, _Checkpoint] = {}
        self._order: deque[_Checkpoint] = deque()  # live checkpoints by first offset (= by id)
        self._heap: list[tuple[int, int]] = []  # (deadline_ms, checkpoint_id), lazily deleted
        self._in_flight = 0
        # Dropped checkpoints that requeued something, so late acks still read "superseded".
        self._retained: OrderedDict[int, _Checkpoint] = OrderedDict()
        self._retain_settled = retain_settled

    def open_checkpoint(
        self,
        checkpoint_id: int,
        offsets: Sequence[int],
        delivery_counts: Sequence[int],
        deadline_ms: int,
    ) -> None:
        """Record a pop batch; ``ValueError`` if it breaks the ordering invariants."""
        if checkpoint_id <= self._last_checkpoint_id:
            raise ValueError(
                f"checkpoint id {checkpoint_id} not above last id {self._last_checkpoint_id}"
            )
        if not offsets or len(offsets) != len(delivery_counts):
            raise ValueError("a checkpoint needs offsets and one delivery count per offset")
        if offsets[0] < self._next_offset:
            raise ValueError(f"offset {offsets[0]} already leased or committed")
        if any(b <= a for a, b in pairwise(offsets)):
            raise ValueError("checkpoint offsets must be strictly increasing")
        if any(not 1 <= c <= MAX_DELIVERY_COUNT for c in delivery_counts):
            raise ValueError(f"delivery counts must be in 1..{MAX_DELIVERY_COUNT}")
        cp = _Checkpoint(checkpoint_id, offsets, delivery_counts, deadline_ms)
        self._last_checkpoint_id = checkpoint_id
        self._next_offset = offsets[-1] + 1
        self._live[checkpoint_id] = cp
        self._order.append(cp)
        heapq.heappush(self._heap, (deadline_ms, checkpoint_id))
        self._in_flight += cp.size

    def _find(self, checkpoint_id: int, offset: int) -> tuple[_Checkpoint | None, int, str]:
        """(live checkpoint, index, "") for a live lease, else (None, -1, status to answer)."""
        cp = self._live.get(checkpoint_id)
        if cp is not None:
            i = cp.index(offset)
            return (cp, i, "") if i >= 0 else (None, -1, INVALID)
        retired = self._retained.get(checkpoint_id)
        if retired is not None:
            i = retired.index(offset)
            return None, -1, (retired.settled_status(i) if i >= 0 else INVALID)
        # Ids and offsets only grow, so a dropped checkpoint has an id we have seen and offsets
        # below every live one; anything else was never issued for this partition.
        floor = self._order[0].first if self._order else self._next_offset
        if checkpoint_id <= self._last_checkpoint_id and offset < floor:
            return None, -1, ALREADY_ACKED
        return None, -1, INVALID

    def _settle(self, cp: _Checkpoint, i: int, outcome: Outcome) -> None:
        _set_bit(cp.settled, i)
        if outcome is Outcome.ACKED:
            _set_bit(cp.acked, i)
        else:
            cp.requeued_any = True
        cp.unsettled -= 1
        self._in_flight -= 1
        while self._order and self._order[0].unsettled == 0:
            head = self._order.popleft()
            del self._live[head.checkpoint_id]
            if head.requeued_any and self._retain_settled > 0:
                # Only the two outcome bitmaps answer late receipts; free the rest.
                head.counts, head.reported, head.overrides = array("H"), bytearray(), None
                self._retained[head.checkpoint_id] = head
                if len(self._retained) > self._retain_settled:
                    self._retained.popitem(last=False)

    def ack(self, checkpoint_id: int, offset: int, now_ms: int) -> str:
        """Ack one delivery; see the module docstring for the statuses."""
        cp, i, status = self._find(checkpoint_id, offset)
        if cp is None:
            return status
        if _bit(cp.settled, i):
            return cp.settled_status(i)
        late = now_ms >= cp.deadline_of(offset)
        self._settle(cp, i, Outcome.ACKED)
        return ACKED_LATE if late else ACKED

    def settle(self, checkpoint_id: int, offset: int, outcome: Outcome) -> str:
        """End one delivery with ``outcome`` (nack, reject, revive); ``ok`` if it was open."""
        cp, i, status = self._find(checkpoint_id, offset)
        if cp is None:
            return status
        if _bit(cp.settled, i):
            return cp.settled_status(i)
        self._settle(cp, i, outcome)
        return OK

    def change_deadline(
        self, checkpoint_id: int, offset: int, deadline_ms: int, now_ms: int
    ) -> str:
        """Move one open lease's deadline (extend, or ``now_ms`` to make it visible now)."""
        cp, i, status = self._find(checkpoint_id, offset)
        if cp is None:
            return status
        if _bit(cp.settled, i):
            return cp.settled_status(i)
        if _bit(cp.reported, i) or now_ms >= cp.deadline_of(offset):
            return SUPERSEDED
        if deadline_ms == cp.deadline_ms:
            if cp.overrides is not None:
                cp.overrides.pop(offset, None)
        else:
            if cp.overrides is None:
                cp.overrides = {}
            cp.overrides[offset] = deadline_ms
        # The entry for the old deadline stays in the heap; expired() checks the real deadline.
        heapq.heappush(self._heap, (deadline_ms, checkpoint_id))
        return OK

    def next_deadline_ms(self) -> int | None:
        """No lease here ends before this (None: none may end). A bound, not always a deadline:
        the entries of changed or settled leases stay until their time passes."""
        return self._heap[0][0] if self._heap else None

    def expired(self, now_ms: int) -> list[tuple[int, int, int]]:
        """Unsettled leases with deadline <= ``now_ms`` not reported before, in deadline order."""
        due: list[tuple[int, int, int, int]] = []  # (deadline, checkpoint_id, offset, count)
        scanned: set[int] = set()
        while self._heap and self._heap[0][0] <= now_ms:
            _, checkpoint_id = heapq.heappop(self._heap)
            cp = self._live.get(checkpoint_id)
            # One scan per checkpoint per call finds every due offset, whichever entry led here.
            if cp is None or checkpoint_id in scanned:
                continue
            scanned.add(checkpoint_id)
            for i in cp.unsettled_indices():
                offset = cp.offset_at(i)
                deadline = cp.deadline_of(offset)
                if not _bit(cp.reported, i) and deadline <= now_ms:
                    _set_bit(cp.reported, i)
                    due.append((deadline, checkpoint_id, offset, cp.counts[i]))
        # A scan also finds offsets of later deadlines than other checkpoints' entries, and stale
        # entries differ between a live and a replayed heap: sorting makes the order exact.
        due.sort()
        return [(checkpoint_id, offset, count) for _, checkpoint_id, offset, count in due]

    def delivery_count(self, checkpoint_id: int, offset: int) -> int:
        """Delivery count of a live lease; ``KeyError`` if it is not live."""
        cp, i, _ = self._find(checkpoint_id, offset)
        if cp is None:
            raise KeyError((checkpoint_id, offset))
        return cp.counts[i]

    def low_watermark(self, cursor: int) -> int:
        """Offset to commit; ``cursor`` is the next offset the pop reader will hand out."""
        if cursor < self._next_offset:
            raise ValueError(f"cursor {cursor} is below leased offset {self._next_offset - 1}")
        if not self._order:
            return cursor
        head = self._order[0]  # settled heads are dropped eagerly, so this one has work left
        return head.offset_at(head.first_unsettled())

    def in_flight(self) -> int:
        """Leased messages not settled yet (expired but not yet requeued ones included)."""
        return self._in_flight
