"""DLQ redrive: a group's dead letters go back to that group alone, each exactly once.

A redrive reads the group's DLQ (read_committed) from where earlier redrives stopped and writes
each dead letter to the group's retry topic, never the origin topic other groups read, as a
retry copy whose delivery count starts over (`kpd-delivery-count: 0`, so its next pop is
delivery 1). The copies and the new position (`revive.redrive_position`, the offsets of a
consumer group of the redrive's own) commit in one transaction. The transactional id is the
group's, so a redrive that starts fences any other of the group and aborts what a killed one
left open: no dead letter goes back twice, and none is skipped (docs/reference.md, "Redrive").

Only what was dead when the redrive began moves: it stops at each partition's end as it found it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import Consumer, Producer, TopicPartition

from foundation.clock import now_ms
from foundation.config import Settings
from foundation.delivery_log import Event
from foundation.kafka_clients import (
    base_config,
    partition_bounds,
    producer_config,
    release_producer,
    state_consumer,
    transactional_producer,
)
from revive import seek_stamps
from revive.copies import copy_event, copy_headers, provenance
from revive.redrive_position import RedrivePosition
from revive.source_record import SourceRecord

MOVED_PER_TRANSACTION = 500
READ_BATCH = 500
# A short wait per read: a partition that ends with a transaction marker is read to its end
# without a record to return, which a longer wait would sit out in full.
READ_WAIT_S = 0.1
REDRIVEN_COUNT = 0  # the delivery count a redriven copy carries: its next pop is delivery 1


@dataclass
class Redriven:
    moved: int = 0
    remaining: int = 0  # dead letters (of the topic asked for) left in the DLQ by this redrive


@dataclass(frozen=True)
class RedriveRequest:
    group: str
    max_messages: int
    topic: str | None  # only dead letters of this origin topic


class _Run:
    """One redrive: a consumer of the DLQ and a producer of the retry topic, for one call."""

    def __init__(self, settings: Settings, request: RedriveRequest) -> None:
        group = settings.group(request.group)
        assert group.retry_topic is not None and group.dlq_topic is not None
        self._settings, self._request = settings, request
        self._dlq, self._retry = group.dlq_topic, group.retry_topic
        self._timeout_s = settings.kafka_timeout_ms / 1000
        name = settings.state_topic(f"redrive.{request.group}")
        self._producer: Producer = transactional_producer(producer_config(settings), name)
        self._open = False  # a transaction is begun
        self._consumer: Consumer = state_consumer(base_config(settings), name)
        # The pop group's own offsets: the seek stamp of each origin (`revive.seek_stamps`).
        self._offsets: Consumer = state_consumer(base_config(settings), request.group)
        self._stamps: dict[str, int] = {}
        self.answer = Redriven()

    def run(self) -> Redriven:
        try:
            # Fences any other redrive of the group first, so its offsets are final when read.
            self._producer.init_transactions(self._timeout_s)
            partitions = self._consumer.list_topics(self._dlq, self._timeout_s).topics[self._dlq]
            for partition in sorted(partitions.partitions):
                self._partition(partition)
            return self.answer
        finally:
            self._consumer.close()
            self._offsets.close()
            release_producer(self._producer)

    def _partition(self, partition: int) -> None:
        tp = TopicPartition(self._dlq, partition)
        deadline = time.monotonic() + self._timeout_s
        low, end = partition_bounds(self._consumer, tp, deadline, self._timeout_s)
        [committed] = self._consumer.committed([tp], timeout=self._timeout_s)
        start = max(committed.offset, low)
        position = RedrivePosition.decode(start, committed.metadata)
        self._consumer.assign([TopicPartition(self._dlq, partition, start)])
        in_transaction = 0
        stalled_at = time.monotonic() + self._timeout_s
        while (at := self._position(tp, start)) < end:
            messages = self._consumer.consume(READ_BATCH, READ_WAIT_S)
            if messages or self._position(tp, start) > at:
                stalled_at = time.monotonic() + self._timeout_s
            elif time.monotonic() > stalled_at:
                raise TimeoutError(f"{self._dlq} [{partition}] not read within the Kafka timeout")
            for message in messages:
                if message.error() is None and message.offset() < end:
                    in_transaction += self._one(SourceRecord.of(message), position)
                if in_transaction >= MOVED_PER_TRANSACTION:
                    self._commit(partition, position)
                    in_transaction = 0
        if in_transaction:
            self._commit(partition, position)
        self._consumer.unassign()

    def _position(self, tp: TopicPartition, start: int) -> int:
        """The next offset to read (`start` until the first record is read)."""
        [at] = self._consumer.position([tp])
        return max(int(at.offset), start)

    def _one(self, record: SourceRecord, position: RedrivePosition) -> int:
        """Move `record` back if it is to go; 1 if it went."""
        offset = record.offset
        found = provenance(record, self._dlq)  # the DLQ's copies carry the retry headers
        if position.is_moved(offset) or found.distrust is not None:
            position.passed(offset)  # moved already, or not a dead letter kpd wrote
            return 0
        origin = found.origin
        if self._request.topic not in (None, origin.topic):
            position.left(offset)
            return 0
        if self.answer.moved >= self._request.max_messages or not position.fits():
            position.left(offset)
            self.answer.remaining += 1
            return 0
        if not self._open:
            self._producer.begin_transaction()
            self._open = True
        stamp = self._stamps.get(origin.topic)
        if stamp is None:  # a copy older than the origin's latest seek would be dropped unread
            stamp = seek_stamps.committed_stamp(self._offsets, origin.topic, self._timeout_s)
            self._stamps[origin.topic] = stamp
        headers = copy_headers(record, origin, REDRIVEN_COUNT, stamp)
        self._producer.produce(self._retry, record.value, record.key, headers=headers)
        record_id, event = copy_event(
            Event.RETRIED, record, origin, REDRIVEN_COUNT, now_ms(), self._settings.node_id,
            group=self._request.group, reason="redrive",
        )  # fmt: skip
        self._producer.produce(self._settings.delivery_log_topic, event, record_id.encode())
        position.moved_one(offset)
        self.answer.moved += 1
        return 1

    def _commit(self, partition: int, position: RedrivePosition) -> None:
        offsets = [TopicPartition(self._dlq, partition, position.next, metadata=position.encode())]
        group_metadata = self._consumer.consumer_group_metadata()
        self._producer.send_offsets_to_transaction(offsets, group_metadata, self._timeout_s)
        self._producer.commit_transaction(self._timeout_s)
        self._open = False


def redrive(settings: Settings, request: RedriveRequest) -> Redriven:
    """Move up to `request.max_messages` dead letters of the group back (blocking: run it in a
    thread). Raises KafkaException when Kafka fails it, fenced by another redrive included."""
    return _Run(settings, request).run()
