"""The pop state of shards another worker leads, kept hot here for a fast takeover.

A standby reads the pop-state partitions of the shards it does not lead, from their replay floors
on, and applies every record to one `PopState` per shard, as their leaders did. When this worker
takes a shard over, its pop service starts from that state and reads only what the standby had
not read yet, so a takeover costs the tail of the topic, not a replay.
"""

from __future__ import annotations

from collections.abc import Callable

from foundation.shards import ShardMap
from revive.pop_state import LedgerKey, PopState
from revive.replay import PopStateReader

Handover = tuple[PopState, dict[int, int]]  # a shard's state, and its partitions' next offsets


class PopFollower:
    """What the standby knows of each shard's pop state; it outlives the standby's runs."""

    def __init__(
        self, shards: ShardMap, ordered: Callable[[LedgerKey], bool] = lambda _: False
    ) -> None:
        self._shards, self._ordered = shards, ordered  # `ordered`: `pop_state.orders_by_key`
        self._states: dict[int, PopState] = {}
        self._next: dict[int, int] = {}  # pop-state partition -> the next offset to apply

    def follow(self, reader: PopStateReader, shards: frozenset[int]) -> None:
        """Assign `reader` the partitions of `shards`: where this follower stopped, or at the
        committed replay floor for a shard it has not followed yet."""
        partitions = [p for s in sorted(shards) for p in self._shards.partitions(s)]
        known = {p: self._next[p] for p in partitions if p in self._next}
        reader.assign(known, [p for p in partitions if p not in known])
        for shard in shards:
            self._states.setdefault(shard, PopState(self._shards, self._ordered))

    def forget(self, shards: frozenset[int]) -> None:
        """Drop what is known of `shards`, no longer followed: following one again starts at its
        committed replay floor, never at an offset retention may have removed meanwhile."""
        for shard in shards:
            self._states.pop(shard, None)
            for partition in self._shards.partitions(shard):
                self._next.pop(partition, None)

    def apply(self, reader: PopStateReader, timeout_s: float) -> int:
        """Apply what the reader brings within `timeout_s`; how many records."""
        read = reader.read(timeout_s)
        for partition, offset, records in read:
            self._states[self._shards.of_partition(partition)].replay(
                [(partition, offset, records)]
            )
            self._next[partition] = offset + 1
        return len(read)

    def positions(self, reader: PopStateReader) -> None:
        """Note where the reader is, even where no record came (a floor, or an empty tail)."""
        for tp in reader.positions():
            if tp.offset >= 0:
                self._next[tp.partition] = max(self._next.get(tp.partition, 0), tp.offset)

    def forget_released(self, reader: PopStateReader) -> int:
        """Forget the checkpoints the leaders released (below their committed replay floors), so
        a standby's memory stays bounded; how many checkpoints the followed states still place."""
        floors = reader.floors()
        return sum(state.forget_below(floors) for state in self._states.values())

    def hand_over(self, shard: int) -> Handover | None:
        """The state of `shard` for the pop service taking it over (the follower forgets it)."""
        state = self._states.pop(shard, None)
        if state is None:
            return None
        partitions = self._shards.partitions(shard)
        return state, {p: self._next.pop(p) for p in partitions if p in self._next}
