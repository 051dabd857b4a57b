"""Materialise kpd's state topics into RocksDB (faust-style changelog -> table).

Every sidecar runs this while it is not the leader, so a standby's index stays hot; a new leader
runs `catch_up()` once, after fencing the old one, so it starts from everything the old leader
committed (and `approach()` before the fence, while the old leader still delivers, so little is
left to read after it). Reads are `read_committed`: aborted writes of a crashed leader never
reach the index.
The next offset per partition is stored in the same RocksDB batch as the state it produced (in
the partition's store: a shard's partitions have the shard's), so a restart resumes exactly where
the index stands.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import structlog
from confluent_kafka import OFFSET_BEGINNING, Message, TopicPartition

from foundation.kafka_clients import consume_ready, stable_ends, state_consumer
from foundation.store import Batch, Store

log = structlog.get_logger(__name__)

OFFSETS_CF = "offsets"
Applier = Callable[[Batch, Sequence[Message]], None]  # records of one store, into its batch
StoreOf = Callable[[str, int], Store]  # the store of a (topic, partition)


class StateFollower:
    def __init__(
        self,
        client_config: dict[str, Any],
        store_of: StoreOf,
        appliers: dict[str, Applier],
        only: Callable[[str, int], bool] = lambda topic, partition: True,
        consumer_overrides: dict[str, Any] | None = None,
    ) -> None:
        self._store_of = store_of
        self._client_config = client_config
        self._written: dict[tuple[str, int], int] = {}  # positions stored, not to store again
        self._appliers = appliers
        self.only = only  # which (topic, partition) to follow: a shard's, or those not led here
        self._consumer = state_consumer(
            client_config, "kpd-state-follower", **(consumer_overrides or {})
        )  # assigned, never joins
        self._assignment: list[TopicPartition] = []
        self.caught_up = False
        self.applied = 0  # records applied so far

    def assign(self) -> None:
        """Assign every partition of the state topics, from the offsets stored in RocksDB."""
        metadata = self._consumer.list_topics(timeout=10)
        self._assignment = [
            TopicPartition(topic, partition, self._stored_offset(topic, partition))
            for topic in self._appliers
            for partition in sorted(metadata.topics[topic].partitions)
            if self.only(topic, partition)
        ]
        self._consumer.assign(self._assignment)

    def poll_once(self, timeout_s: float) -> int:
        """Apply what arrives within `timeout_s`; return how many records were applied."""
        messages = consume_ready(self._consumer, 2000, timeout_s)
        records = [m for m in messages if m.error() is None]
        batches = stage_by_store(self._store_of, self._appliers, records)
        for tp in self._consumer.position(self._assignment):
            place = (tp.topic, tp.partition)
            if tp.offset >= 0 and self._written.get(place) != tp.offset:
                store = self._store_of(*place)
                stage_position(batches.setdefault(store, store.batch()), *place, tp.offset)
                self._written[place] = tp.offset
        for store, batch in batches.items():
            store.write(batch)
        self.applied += len(records)
        return len(records)

    def catch_up(self, timeout_s: float, beat: Callable[[], None] = lambda: None) -> None:
        """Return once every partition is read up to its end (as of now); `beat` per poll."""
        behind = self._read_to_ends(timeout_s, beat)
        if behind:
            raise TimeoutError(f"state topics not caught up: {behind}")
        if not self.caught_up:
            log.info("state caught up", partitions=len(self._assignment))
        self.caught_up = True

    def approach(self, timeout_s: float, beat: Callable[[], None] = lambda: None) -> None:
        """Read up to the partitions' ends as of now while their writer may still write (it has
        not been fenced yet); after `timeout_s`, give up quietly: `catch_up` reads what is left,
        after the fence. A writer that died mid-transaction does not hold this up: the end a
        read_committed consumer is given is the last stable offset, before that transaction."""
        behind = self._read_to_ends(timeout_s, beat)
        log.info("state read before the fence", behind=len(behind))

    def _read_to_ends(self, timeout_s: float, beat: Callable[[], None]) -> list[TopicPartition]:
        """Apply records until every partition reaches its end as of now; the partitions still
        behind if `timeout_s` passed first."""
        deadline = time.monotonic() + timeout_s
        ends = stable_ends(self._client_config, self._assignment, deadline, 10)
        # Until its first fetch a partition's position is invalid (< 0): start from the offset
        # it was assigned at (0 for "from the beginning").
        start = {(tp.topic, tp.partition): max(tp.offset, 0) for tp in self._assignment}
        while True:
            positions = self._consumer.position(self._assignment)
            behind = [
                tp
                for tp in positions
                if max(tp.offset, start[(tp.topic, tp.partition)]) < ends[(tp.topic, tp.partition)]
            ]
            if not behind or time.monotonic() > deadline:
                return behind
            self.poll_once(0.05)
            beat()

    def close(self) -> None:
        self._consumer.close()

    def _stored_offset(self, topic: str, partition: int) -> int:
        data = self._store_of(topic, partition).get(OFFSETS_CF, _offset_key(topic, partition))
        return OFFSET_BEGINNING if data is None else int.from_bytes(data, "big")


def stage_by_store(
    store_of: StoreOf, appliers: dict[str, Applier], records: Sequence[Message]
) -> dict[Store, Batch]:
    """Stage `records` into a batch per store: each applier call gets one topic's records of
    one store, so its batch holds only writes of that store's shard."""
    batches: dict[Store, Batch] = {}
    groups: dict[tuple[str, Store], list[Message]] = {}
    for message in records:
        topic: str = message.topic()  # type: ignore[assignment]
        store = store_of(topic, message.partition())  # type: ignore[arg-type]
        groups.setdefault((topic, store), []).append(message)
    for (topic, store), group in groups.items():
        appliers[topic](batches.setdefault(store, store.batch()), group)
    return batches


def _offset_key(topic: str, partition: int) -> bytes:
    return f"{topic}:{partition}".encode()


def stage_position(batch: Batch, topic: str, partition: int, next_offset: int) -> None:
    """Record that the index holds everything of `topic`/`partition` before `next_offset`."""
    batch.put(OFFSETS_CF, _offset_key(topic, partition), next_offset.to_bytes(8, "big"))
