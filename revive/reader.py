"""Re-read records by offset, to copy them to a retry or dead-letter topic.

Leases keep only offsets (bits in a ledger), never payloads, so a message that must be copied is
read again from Kafka, as RocketMQ's revive service does: cheap, since it is recent and cached.
A leased record may be gone by then (retention, delete-records, a deleted topic): the partition's
low watermark says so at once, where reading from it would wait for a record that never comes
while every pop of the shard waited too.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from foundation.kafka_clients import consume_ready, state_consumer
from revive.source_record import SourceRecord

GONE = frozenset(
    {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}
)


class OffsetReader:
    def __init__(self, client_config: dict[str, Any], timeout_s: float) -> None:
        self._config, self._timeout_s = client_config, timeout_s
        # Made on the first copy: a shard whose messages are all acked holds no client for it.
        self._made: Consumer | None = None

    @property
    def _consumer(self) -> Consumer:
        if self._made is None:  # assign() only, never commits
            self._made = state_consumer(
                self._config, "kpd-offset-reader", **{"fetch.wait.max.ms": 5}
            )
        return self._made

    def read(self, wanted: set[tuple[str, int, int]]) -> dict[tuple[str, int, int], SourceRecord]:
        """Records at (topic, partition, offset); ones that no longer exist are left out."""
        by_partition: dict[tuple[str, int], set[int]] = defaultdict(set)
        for topic, partition, offset in wanted:
            by_partition[(topic, partition)].add(offset)
        found: dict[tuple[str, int, int], SourceRecord] = {}
        for (topic, partition), asked in by_partition.items():
            offsets = self.present(topic, partition, asked)
            if not offsets:
                continue
            self._consumer.assign([TopicPartition(topic, partition, min(offsets))])
            last = max(offsets)
            deadline = time.monotonic() + self._timeout_s
            done = False
            while not done and time.monotonic() < deadline:
                for message in consume_ready(self._consumer, 1_000, 0.1):
                    if message.error() is not None:
                        continue
                    if message.offset() in offsets:
                        found[(topic, partition, message.offset())] = SourceRecord.of(message)
                    done = done or message.offset() >= last
            self._consumer.unassign()
        return found

    def present(self, topic: str, partition: int, offsets: set[int]) -> set[int]:
        """The offsets still in the partition (at or above its low watermark)."""
        try:
            low, high = self._consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=self._timeout_s
            )
        except KafkaException as error:
            if error.args[0].code() in GONE:  # the topic is gone, and its records with it
                return set()
            raise
        return {offset for offset in offsets if low <= offset < high}

    def close(self) -> None:
        if self._made is not None:
            self._made.close()
