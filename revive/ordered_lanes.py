"""The records of a group's lanes ordered by key (docs/fifo.md), from their read until their
message is done: a released message is handed out again from here, in its place.

Its `KeyLane` (in the pop state) says which records a pop may take; this keeps the records
themselves. What is eligible now is counted after each step of the service (`ready`), for the
HTTP side's long polls to read from another thread.
"""

from __future__ import annotations

from collections.abc import Callable

from kpd_core import Provenance

from revive.key_lane import KeyLane
from revive.lanes import Fetched, LaneKey

# What a lane counts as ready at most: a long poll needs to know only that something is (each
# count walks the lane's window from its start).
READY_COUNTED = 1_000


class OrderedLanes:
    def __init__(self, lane_of: Callable[[LaneKey], KeyLane]) -> None:
        self._lane_of = lane_of  # the lane's KeyLane, made if new
        self._kept: dict[LaneKey, dict[int, Fetched]] = {}
        self.ready: dict[LaneKey, int] = {}  # eligible records as of the last `count_ready`

    def start(self, key: LaneKey, committed: int) -> None:
        """The lane is read from the group's committed offset (-1: none yet)."""
        if committed >= 0:
            self._lane_of(key).read_from(committed)

    def add(self, key: LaneKey, run: list[Fetched]) -> int:
        """Records read for the lane, in offset order; how many are kept."""
        lane = self._lane_of(key)
        kept = self._kept.setdefault(key, {})
        before = len(kept)
        for pair in run:
            record = pair[0]
            lane.offer(record.offset, record.key)
            if lane.pending(record.offset):  # done before a restart: nothing to hand out
                kept[record.offset] = pair
        return len(kept) - before

    def take(self, key: LaneKey, limit: int, now_ms: int) -> list[Fetched]:
        """Up to `limit` records a pop may lease now, with the deliveries they had."""
        kept = self._kept.get(key)
        if not kept:
            return []
        taken = []
        for offset, count in self._lane_of(key).eligible(limit, now_ms):
            record, found = kept[offset]
            if found.previous_deliveries != count - 1:  # released before: delivered again
                found = Provenance(found.origin, count - 1)
            taken.append((record, found))
        return taken

    def take_for(self, topic: str, limit: int, now_ms: int) -> list[tuple[LaneKey, Fetched]]:
        """Up to `limit` records a pop of `topic` may lease now, from its lanes in turn."""
        taken: list[tuple[LaneKey, Fetched]] = []
        for key in self.lanes():
            if key[0] == topic and len(taken) < limit:
                taken += [(key, f) for f in self.take(key, limit - len(taken), now_ms)]
        return taken

    def drop_done(self, key: LaneKey) -> int:
        """Forget the records whose message is done; how many."""
        kept = self._kept.get(key)
        done = self._lane_of(key).take_done()
        if not kept:
            return 0
        before = len(kept)
        for offset in done:
            kept.pop(offset, None)
        return before - len(kept)

    def count_ready(self, now_ms: int) -> set[str]:
        """Count what each lane could hand out now; the topics whose lanes could hand out more
        than before."""
        more = set()
        for key, kept in self._kept.items():
            counted = min(len(kept), READY_COUNTED)
            ready = len(self._lane_of(key).eligible(counted, now_ms)) if kept else 0
            if ready > self.ready.get(key, 0):
                more.add(key[0])
            self.ready[key] = ready
        return more

    def ready_for(self, topic: str) -> int:
        """What the lanes of `topic` could hand out as of the last `count_ready`. Called from
        the event loop while the service thread may count: it sums a copy of `ready`."""
        return sum(count for key, count in list(self.ready.items()) if key[0] == topic)

    def reposition(self, key: LaneKey) -> int:
        """The lane is read again from a new offset (a seek): nothing is kept; how many went."""
        self.ready.pop(key, None)
        return len(self._kept.pop(key, {}))

    def forget_topics(self, gone: set[str]) -> None:
        """The topics `gone` are read no more: nothing of their lanes is kept."""
        for key in self.lanes():
            if key[0] in gone:
                self.reposition(key)

    def lanes(self) -> list[LaneKey]:
        return list(self._kept)
