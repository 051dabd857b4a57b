"""Kafka in for one shard's delay leader: its buffer and inbox partitions, read in chunks.

confluent-kafka makes some 8 GC-tracked objects per buffer record (the message, its header list
and tuples) that live as long as the message. A step holding all its records triggered a young
collection every 90 or so: 4.6% of bench/delay.py's mixed phase with the default thresholds.
Read in chunks and dropped once handled, the records in flight
stay below the collector's young threshold (700 objects).

A chunk is ingested only in this shard's ingest turn (`delay_service.ingest_turns`); one read
while another shard of the worker had the turn is held for a later step, and the offsets a step
commits never pass a record it has not ingested.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Message, TopicPartition

from delay_service import metrics
from delay_service.ingest_turns import IngestTurns
from foundation.kafka_clients import consume_ready, state_consumer
from foundation.shards import ShardMap

# How long the broker holds an empty fetch of a buffer reader (kpd's others hold 100 ms,
# `HELD_FETCH_MS`). A record that arrives answers a held fetch at once; the wait only delays a
# partition assigned or sought while a fetch is held, and a buffer reader is assigned once and
# seeks only to redo a refused step. With 8 shards led, 100 ms cost an idle broker some 0.03
# cores.
BUFFER_FETCH_WAIT_MS = 500

INGEST_CHUNK = 64  # records read at a time (see above)

First = dict[tuple[str, int], int]  # offset of a step's first record, per (topic, partition)


class BufferReader:
    def __init__(
        self,
        client_config: dict[str, Any],
        group_id: str,
        shard: int,
        turns: IngestTurns,
        timeout_s: float,
    ) -> None:
        self.shard, self._turns, self._timeout_s = shard, turns, timeout_s
        self._consumer = state_consumer(
            client_config, group_id, **{"fetch.wait.max.ms": BUFFER_FETCH_WAIT_MS}
        )
        self._assignment: list[TopicPartition] = []
        self._held: tuple[list[Message], First] | None = None

    def assign(self, topics: tuple[str, ...], shards: ShardMap) -> None:
        """Read this shard's partitions of `topics` from the offsets committed for them."""
        metadata = self._consumer.list_topics(timeout=self._timeout_s).topics
        partitions = [
            TopicPartition(topic, p)
            for topic in topics
            for p in shards.partitions(self.shard, len(metadata[topic].partitions))
        ]
        committed = self._consumer.committed(partitions, timeout=self._timeout_s)
        self._assignment = [
            TopicPartition(
                tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            )
            for tp in committed
        ]
        self._consumer.assign(self._assignment)

    def next_chunk(self, wait_s: float) -> tuple[list[Message], First]:
        """Records to ingest in this step, with the offset of the first one per partition, if
        this shard has the worker's ingest turn (`turn_done` ends it); else none, and what was
        read is held. Waits up to `wait_s` for records, or for the turn."""
        if self._held is None:
            first: First = {}
            chunk = self.more(first, wait_s)
        else:
            self._turns.wait(self.shard, wait_s)
            chunk, first = self._held
        if not chunk or self._turns.take(self.shard):
            self._held = None
            return chunk, first
        self._held = (chunk, first)
        metrics.INGEST_WAITS.inc()
        return [], {}

    def more(self, first: First, wait_s: float = 0) -> list[Message]:
        """Consume a chunk, noting each partition's first offset at once: a step that fails
        before it has handled all of it (a record refused as it is produced) rewinds the
        unhandled records too."""
        chunk = consume_ready(self._consumer, INGEST_CHUNK, wait_s)
        for message in chunk:
            if message.error() is None:
                first.setdefault((message.topic(), message.partition()), message.offset())
        return chunk

    def turn_done(self) -> None:
        """The next shard ingests while this one commits."""
        self._turns.give_back(self.shard)

    def offsets(self) -> tuple[list[TopicPartition], Any]:
        """What a step that ingested commits in its transaction: every record read so far."""
        return self._consumer.position(self._assignment), self._consumer.consumer_group_metadata()

    def rewind(self, first: First) -> None:
        """An aborted step's records are read again."""
        for (topic, partition), offset in first.items():
            self._consumer.seek(TopicPartition(topic, partition, offset))

    def close(self) -> None:
        self._turns.give_back(self.shard)
        self._consumer.close()
