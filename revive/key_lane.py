"""The lease book of one lane of a group that orders by key (`ordering = "key"`, docs/fifo.md).

Kafka's `SharePartition` keeps a state per offset; so does this, for the offsets from the first
one not done to the last one read. Among the offsets of one key, only the first one not done
(the key's *head*) may be leased, in offset order: the next waits until it is acked or
dead-lettered. A released lease (a nack, an expiry) makes the head available again in place,
after its backoff, with its delivery count kept; the key stays blocked meanwhile. Offsets
without a key are leased in any order.

A new leader rebuilds a lane from the state records (checkpoints, acks) and the records it
reads again from the committed offset: a checkpoint may name an offset not read yet, whose key
is then unknown. Nothing at or after the first offset of unknown key is leased until that record
has been read again ("catch up before acting"), so no key is handed out twice.

Statuses are the ledger's (`revive.ledger`); every method is deterministic in its arguments, so
a replay answers as the live lane did. What it keeps of each offset is a `Slot`
(`revive.key_lane_slots`); its `LaneTimers` (`revive.key_lane_timers`) tell when its leases
end and its released messages come again.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Sequence

from revive.key_lane_slots import UNKNOWN, Key, Slot, State, UnknownKey
from revive.key_lane_timers import LaneTimers
from revive.ledger import ACKED, ACKED_LATE, ALREADY_ACKED, INVALID, OK, SUPERSEDED


class KeyLane:
    def __init__(self) -> None:
        self._slots: dict[int, Slot] = {}  # the timers read it too: cleared, never rebound
        self._offsets: deque[int] = deque()  # the window's offsets, in order
        self._heads: dict[bytes, deque[int]] = {}  # each key's offsets not done, in order
        # The offset after the last record read; below it, an offset not in the window is
        # done (or no record). None until the first record is read.
        self._read_to: int | None = None
        self._last_checkpoint = 0
        self._superseded_through = 0  # a seek ended every lease of a checkpoint up to this id
        self._done_since: list[int] = []  # offsets done since `take_done` last asked
        self._timers = LaneTimers(self._slots)
        self._leased = 0
        # The offsets a pop may take once their time has come, in order: available ones that
        # head their key or have none. Pops walk these, not the whole window.
        self._ready: list[int] = []

    # -- what the fetcher reads ----------------------------------------------------------

    def read_from(self, offset: int) -> None:
        """Records are read from `offset` on (the group's committed offset): what lies below
        it is done."""
        if self._read_to is None or offset > self._read_to:
            self._read_to = offset
            self._trim()

    def offer(self, offset: int, key: Key) -> None:
        """The record at `offset` was read. Records are read in offset order, from the
        group's committed offset (`read_from`): what lies below the first one read is done."""
        if self._read_to is not None and offset < self._read_to:
            return  # read before
        self._read_to = offset + 1
        slot = self._slots.get(offset)
        if slot is None:
            self._add(offset, Slot(key))
        elif slot.key is UNKNOWN:
            slot.key = key
            if slot.state is not State.DONE:
                self._block(offset, key)
            self._refresh(offset)
        self._trim()

    def pending(self, offset: int) -> bool:
        """Is the message at `offset` still to be done (its record must be kept)?"""
        slot = self._slots.get(offset)
        return slot is not None and slot.state is not State.DONE

    def take_done(self) -> list[int]:
        """The offsets done since the last call: their records are no longer needed."""
        done, self._done_since = self._done_since, []
        return done

    # -- pop -----------------------------------------------------------------------------

    def eligible(self, wanted: int, now_ms: int) -> list[tuple[int, int]]:
        """Up to `wanted` (offset, delivery count it would have) to lease now, in offset order;
        none at or past an offset whose record was not read again yet."""
        found: list[tuple[int, int]] = []
        for offset in self._ready:  # all read again: below every offset of unknown key
            if len(found) >= wanted:
                break
            slot = self._slots[offset]
            if slot.available_at_ms <= now_ms:
                found.append((offset, slot.deliveries + 1))
        return found

    def open_checkpoint(
        self, checkpoint_id: int, offsets: Sequence[int], counts: Sequence[int], deadline_ms: int
    ) -> None:
        """Lease `offsets` (live: what `eligible` gave; replayed: as the record says)."""
        if checkpoint_id <= self._last_checkpoint:
            raise ValueError(f"checkpoint id {checkpoint_id} not above {self._last_checkpoint}")
        if not offsets or len(offsets) != len(counts):
            raise ValueError("a checkpoint needs offsets and one delivery count per offset")
        for offset in offsets:
            slot = self._slots.get(offset)
            if slot is not None and slot.state is not State.AVAILABLE:
                raise ValueError(f"offset {offset} is not available")
        self._last_checkpoint = checkpoint_id
        for offset, count in zip(offsets, counts, strict=True):
            slot = self._slots.get(offset)
            if slot is None:
                slot = self._add(offset, Slot(UNKNOWN))
            slot.state, slot.deliveries, slot.reported = State.LEASED, count, False
            slot.checkpoint_id, slot.deadline_ms = checkpoint_id, deadline_ms
            self._timers.lease_ends(deadline_ms, offset, checkpoint_id)
            self._refresh(offset)
        self._leased += len(offsets)

    # -- settle --------------------------------------------------------------------------

    def ack_status(self, checkpoint_id: int, offset: int, now_ms: int) -> str:
        """What `ack` would answer now, changing nothing."""
        slot, status = self._lease(checkpoint_id, offset)
        if slot is None:
            return status
        return ACKED_LATE if now_ms >= slot.deadline_ms else ACKED

    def ack(self, checkpoint_id: int, offset: int, now_ms: int) -> str:
        slot, status = self._lease(checkpoint_id, offset)
        if slot is None:
            return status
        self._done(offset, slot, acked=True)
        return ACKED_LATE if now_ms >= slot.deadline_ms else ACKED

    def release(self, checkpoint_id: int, offset: int, available_at_ms: int) -> str:
        """A nack or an expiry: the message comes again in place at `available_at_ms`."""
        slot, status = self._lease(checkpoint_id, offset)
        if slot is None:
            return status
        slot.state, slot.available_at_ms = State.AVAILABLE, available_at_ms
        self._leased -= 1
        self._timers.released(available_at_ms, offset)
        self._refresh(offset)
        return OK

    def dead_letter(self, checkpoint_id: int, offset: int) -> str:
        slot, status = self._lease(checkpoint_id, offset)
        if slot is None:
            return status
        self._done(offset, slot, acked=False)
        return OK

    def change_deadline(
        self, checkpoint_id: int, offset: int, deadline_ms: int, now_ms: int
    ) -> str:
        slot, status = self._lease(checkpoint_id, offset)
        if slot is None:
            return status
        if slot.reported or now_ms >= slot.deadline_ms:
            return SUPERSEDED  # the revive loop may be releasing it already
        slot.deadline_ms = deadline_ms
        self._timers.lease_ends(deadline_ms, offset, checkpoint_id)
        return OK

    def next_deadline_ms(self) -> int | None:
        """When the next lease not reported yet ends (None: no lease is open)."""
        return self._timers.next_deadline_ms()

    def next_available_ms(self, now_ms: int) -> int | None:
        """When a released message of this lane may be leased next, if later than now."""
        return self._timers.next_available_ms(now_ms)

    def seek(self, offset: int) -> None:
        """The group's position moved to `offset`, either way: every lease ends (its receipt
        answers superseded), and records are read again from there."""
        self._superseded_through = self._last_checkpoint
        self._done_since += [o for o, slot in self._slots.items() if slot.state is not State.DONE]
        self._slots.clear()
        self._offsets.clear()
        self._heads.clear()
        self._timers.clear()
        self._leased, self._ready = 0, []
        self._read_to = offset

    def expired(self, now_ms: int) -> list[tuple[int, int, int]]:
        """(checkpoint id, offset, delivery count) of leases past their deadline, each once."""
        return self._timers.expired(now_ms)

    # -- offsets -------------------------------------------------------------------------

    def low_watermark(self, cursor: int) -> int:
        """The offset to commit: the first one not done, else `cursor`, the next to read."""
        return self._offsets[0] if self._offsets else cursor

    def in_flight(self) -> int:
        return self._leased

    def blocked_keys(self) -> int:
        return len(self._heads)

    # -- inside --------------------------------------------------------------------------

    def _add(self, offset: int, slot: Slot) -> Slot:
        self._slots[offset] = slot
        if not self._offsets or offset > self._offsets[-1]:
            self._offsets.append(offset)
        else:
            self._offsets.insert(bisect.bisect(self._offsets, offset), offset)
        if not isinstance(slot.key, UnknownKey):
            self._block(offset, slot.key)
            self._refresh(offset)
        return slot

    def _block(self, offset: int, key: Key) -> None:
        if key is not None:
            offsets = self._heads.setdefault(key, deque())
            offsets.insert(bisect.bisect(offsets, offset), offset)
            if offsets[0] == offset and len(offsets) > 1:
                self._refresh(offsets[1])  # no longer its key's head

    def _refresh(self, offset: int) -> None:
        """Put `offset` in `_ready`, or take it out, as its slot now says."""
        slot = self._slots.get(offset)
        ready = (
            slot is not None
            and slot.state is State.AVAILABLE
            and not isinstance(slot.key, UnknownKey)
            and (slot.key is None or self._heads[slot.key][0] == offset)
        )
        at = bisect.bisect_left(self._ready, offset)
        present = at < len(self._ready) and self._ready[at] == offset
        if ready and not present:
            self._ready.insert(at, offset)
        elif present and not ready:
            del self._ready[at]

    def _lease(self, checkpoint_id: int, offset: int) -> tuple[Slot | None, str]:
        """The slot leased at (checkpoint id, offset), else the status to answer."""
        if checkpoint_id > self._last_checkpoint:
            return None, INVALID  # never issued here
        if checkpoint_id <= self._superseded_through:
            return None, SUPERSEDED  # a seek ended it
        slot = self._slots.get(offset)
        if slot is None:  # done and out of the window, or never leased
            read = self._read_to is not None and offset < self._read_to
            return None, ALREADY_ACKED if read else INVALID
        if slot.checkpoint_id != checkpoint_id:
            return None, SUPERSEDED if checkpoint_id < slot.checkpoint_id else INVALID
        if slot.state is State.LEASED:
            return slot, OK
        if slot.state is State.DONE and slot.acked:
            return None, ALREADY_ACKED
        return None, SUPERSEDED  # released, or dead-lettered

    def _done(self, offset: int, slot: Slot, acked: bool) -> None:
        slot.state, slot.acked = State.DONE, acked
        self._leased -= 1
        self._done_since.append(offset)
        if isinstance(slot.key, bytes):
            offsets = self._heads[slot.key]
            offsets.remove(offset)
            if offsets:
                self._refresh(offsets[0])  # the key's next message heads it now
            else:
                del self._heads[slot.key]
        self._trim()

    def _trim(self) -> None:
        """Done offsets leave the window from its start, once read: a replayed checkpoint's
        offsets stay until the records before them are read again."""
        read_to = -1 if self._read_to is None else self._read_to
        while self._offsets and self._offsets[0] < read_to:
            if self._slots[self._offsets[0]].state is not State.DONE:
                break
            del self._slots[self._offsets.popleft()]
