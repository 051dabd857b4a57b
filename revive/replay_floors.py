"""A pop leader's replay floors: where the next leader of its shard starts reading pop-state.

The leader starts by replaying its shard from the floors (`revive.replay`; a standby's hot state
is read on from where it got to instead). Then each floor that moves (`PopState.floors`) is
committed as the offset of the consumer group `<prefix>pop-floor`, in the transaction of the
step that moved it, with the group metadata of the reader that replayed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import TopicPartition

from foundation.transactions import Transaction
from revive.pop_state import LedgerKey, PopState
from revive.replay import PopStateReader


class ReplayFloors:
    def __init__(
        self,
        client_config: dict[str, Any],
        topics: tuple[str, str],  # the pop-state topic, the floors' consumer group
        partitions: list[int],  # the shard's partitions of the pop-state topic
        timeout_s: float,
    ) -> None:
        self._topic, floor_group = topics
        self._reader = PopStateReader(client_config, self._topic, floor_group, timeout_s)
        self._partitions = partitions
        self._sent: dict[int, int] = {}  # the floor last committed, per partition

    def replay(self, state: PopState, at: dict[int, int], beat: Callable[[], None]) -> int:
        """Read the partitions of `at` from the offsets it gives and the others from their
        floor, up to their ends, into `state`; how many records were read."""
        self._reader.assign(at, [p for p in self._partitions if p not in at])
        read = self._reader.replay_to_end(state, beat)
        self._reader.stop_reading()
        return read

    def moved(self, state: PopState, committed: Callable[[LedgerKey], int]) -> dict[int, int]:
        """The floors that differ from those last committed (each look scans the ledgers)."""
        floors = state.floors(self._partitions, committed)
        return {p: o for p, o in floors.items() if self._sent.get(p) != o}

    def send(self, txn: Transaction, floors: dict[int, int]) -> None:
        """Commit `floors`, if any, with `txn`; they count as committed once `sent` says so."""
        if floors:
            offsets = [TopicPartition(self._topic, p, o) for p, o in floors.items()]
            txn.send_offsets(offsets, self._reader.consumer.consumer_group_metadata())

    def sent(self, floors: dict[int, int]) -> None:
        self._sent.update(floors)

    def close(self) -> None:
        self._reader.close()
