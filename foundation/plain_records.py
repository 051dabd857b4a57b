"""A transaction's plain records (no headers, no tag: state records, log events), handed to
librdkafka a batch at a time.

In the delay worker, beside its other work, a `produce()` call cost about 6 us of CPU per record;
one `produce_batch()` call of a few hundred records costs under 1 us a record. Records are batched
by topic and partition: librdkafka ignores a partition given per record in a batch (it is the
batch's, or its partitioner's for every record). Records added with the same `partition` keep their
order: librdkafka queues a batch in order, and when its queue is full it refuses the batch's tail
from the first record that did not fit, never one record in the middle (`test_plain_records.py`
checks both), so that tail is offered again once some records went out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

SEND_EVERY = 256  # records queued before they are handed over, so they go out as the step runs
QUEUE_FULL_WAIT_S = 0.01  # lets librdkafka send some of its queue before the tail is offered again

Callback = Callable[[KafkaError | None, Message], None]
Place = tuple[str, int]  # topic, partition (-1: the producer's partitioner)


class PlainRecords:
    def __init__(self) -> None:
        self._by_place: dict[Place, list[dict[str, Any]]] = {}
        self.topics: set[str] = set()  # those with records queued
        self._count = 0

    def add(
        self, topic: str, key: str, value: bytes, partition: int, callback: Callback | None
    ) -> bool:
        """Queue one record (`partition` -1: the producer's partitioner); True once enough are
        queued to be sent."""
        record: dict[str, Any] = {"key": key, "value": value}
        if callback is not None:
            record["callback"] = callback
        self._by_place.setdefault((topic, partition), []).append(record)
        self.topics.add(topic)
        self._count += 1
        return self._count >= SEND_EVERY

    def extend(self, topic: str, records: list[tuple[str, bytes]]) -> bool:
        """Queue (key, value) records for the producer's partitioner; as `add` does."""
        queued = [{"key": key, "value": value} for key, value in records]
        self._by_place.setdefault((topic, -1), []).extend(queued)
        self.topics.add(topic)
        self._count += len(queued)
        return self._count >= SEND_EVERY

    def send(self, producer: Producer) -> KafkaError | None:
        """Hand every queued record to `producer`. Returns librdkafka's `_STATE` refusal if the
        transaction had already failed (nothing more is worth queueing); raises any other
        refusal as a `KafkaException`: a plain record is kpd's own, so it is an infrastructure
        fault."""
        if not self._count:
            return None
        by_place = self._by_place
        self.clear()
        for place, records in by_place.items():
            failed = _send(producer, place, records)
            if failed is not None:
                return failed
        return None

    def clear(self) -> None:
        self._by_place, self.topics, self._count = {}, set(), 0


def _send(producer: Producer, place: Place, records: list[dict[str, Any]]) -> KafkaError | None:
    topic, partition = place
    placed = {} if partition < 0 else {"partition": partition}
    while True:
        if producer.produce_batch(topic, records, **placed) == len(records):
            return None
        first = next(n for n, record in enumerate(records) if "_error" in record)
        error: KafkaError = records[first]["_error"]
        if error.code() == KafkaError._STATE:
            return error
        tail = records[first:]
        if error.code() != KafkaError._QUEUE_FULL or not all("_error" in r for r in tail):
            raise KafkaException(error)
        for record in tail:
            del record["_error"]
        producer.poll(QUEUE_FULL_WAIT_S)
        records = tail
