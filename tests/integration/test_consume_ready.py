"""`consume_ready` against a real broker: records are handed over as soon as there are any."""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Producer, TopicPartition
from kafka_helpers import unique

from foundation.kafka_clients import consume_ready, state_consumer

WAIT_S = 5.0  # what a batch consume would wait out for a batch that never fills


def test_records_are_handed_over_as_soon_as_there_are_any(kafka_bootstrap: str, new_topic):
    topic = new_topic("ready")
    consumer = state_consumer({"bootstrap.servers": kafka_bootstrap}, unique("ready"))
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0})
    try:
        assert consume_ready(consumer, 100, 0.5) == []  # nothing there: the timeout holds
        producer.produce(topic, b"one")
        producer.flush(10)
        started = time.monotonic()
        [record] = consume_ready(consumer, 100, WAIT_S)
        assert record.value() == b"one"
        assert time.monotonic() - started < WAIT_S / 2  # not held for a batch that never fills
        for n in range(10):
            producer.produce(topic, str(n).encode())
        producer.flush(10)
        got: list[bytes] = []
        while len(got) < 10:
            batch = consume_ready(consumer, 4, WAIT_S)
            assert 1 <= len(batch) <= 4
            got += [m.value() for m in batch]
        assert got == [str(n).encode() for n in range(10)]
    finally:
        consumer.close()
