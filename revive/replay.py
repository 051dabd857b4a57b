"""Read a shard's pop-state partitions from their replay floor (`revive.pop_state`).

The floor of each partition is committed, in the pop leader's own transactions, as the offset of
the consumer group `<prefix>pop-floor` (as RocketMQ commits its revive offset), so a new leader
and a standby start there, and everything below it can age out of the topic.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import structlog
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from foundation.kafka_clients import consume_ready, stable_ends, state_consumer
from revive.pop_state import PopState
from revive.records import InvalidStateRecord, StateRecord, unpack_batch

log = structlog.get_logger(__name__)

Read = tuple[int, int, list[StateRecord]]  # partition, offset, the records of that Kafka record


class PopStateReader:
    def __init__(
        self, config: dict[str, Any], topic: str, floor_group: str, timeout_s: float
    ) -> None:
        self.consumer = state_consumer(config, floor_group)  # assigned; it never commits
        self._config = config
        self._topic, self._timeout_s = topic, timeout_s
        self._partitions: list[TopicPartition] = []

    def assign(self, at: dict[int, int], from_floor: list[int]) -> None:
        """Read partitions from the given offsets, and others from their committed floor."""
        wanted = [TopicPartition(self._topic, p) for p in from_floor]
        committed = self.consumer.committed(wanted, timeout=self._timeout_s) if wanted else []
        self._partitions = [TopicPartition(self._topic, p, o) for p, o in at.items()] + [
            TopicPartition(
                self._topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            )
            for tp in committed
        ]
        self.consumer.assign(self._partitions)

    def floors(self) -> dict[int, int]:
        """The committed replay floor of each assigned partition that has one."""
        if not self._partitions:
            return {}
        wanted = [TopicPartition(self._topic, tp.partition) for tp in self._partitions]
        committed = self.consumer.committed(wanted, timeout=self._timeout_s)
        return {tp.partition: tp.offset for tp in committed if tp.offset >= 0}

    def positions(self) -> list[TopicPartition]:
        return self.consumer.position(self._partitions) if self._partitions else []

    def read(self, timeout_s: float) -> list[Read]:
        """What arrives within `timeout_s`; foreign records are skipped, never fatal."""
        found = []
        for message in consume_ready(self.consumer, 5_000, timeout_s):
            if message.error() is not None or not message.value():
                continue
            try:
                records = unpack_batch(message.value())
            except InvalidStateRecord as error:
                log.warning(
                    "skipping a foreign pop-state record", offset=message.offset(), error=str(error)
                )
                continue
            found.append((message.partition(), message.offset(), records))
        return found

    def replay_to_end(self, state: PopState, beat: Callable[[], None]) -> int:
        """Apply every record up to the partitions' ends as of now; how many were read."""
        deadline = time.monotonic() + self._timeout_s
        found = stable_ends(self._config, self._partitions, deadline, self._timeout_s)
        ends = {partition: end for (_, partition), end in found.items()}
        start = {tp.partition: max(tp.offset, 0) for tp in self._partitions}
        count = 0
        while True:
            positions = self.positions()
            if all(max(p.offset, start[p.partition]) >= ends[p.partition] for p in positions):
                state.read_up_to(ends)
                return count
            beat()
            batch = self.read(0.1)
            count += len(batch)
            state.replay(batch)

    def stop_reading(self) -> None:
        """Read nothing more (a leader that replayed its shard): the consumer stays, for the
        group metadata its transactions send the floors with, but fetches nothing, where it
        went on fetching back every record its leader wrote."""
        self.consumer.unassign()
        self._partitions = []

    def close(self) -> None:
        self.consumer.close()
