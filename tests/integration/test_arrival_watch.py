"""`revive.arrivals` against a real broker: a record that arrives for a parked long poll wakes
the pop service that fetches its partition, and no other."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from confluent_kafka import Producer
from kafka_helpers import wait_for

from revive.arrivals import ArrivalWatch

Key = tuple[str, str]


class Service:
    """Stands in for a shard's pop service: which partitions it fetches for which polls."""

    def __init__(self, key: Key, partition: tuple[str, int]) -> None:
        self.key, self.partition = key, partition
        self.woken = 0
        self.lock = threading.Lock()

    def watched(self, awaited: Iterable[Key]) -> list[tuple[str, int]]:
        return [self.partition] if self.key in awaited else []

    def arrived(self) -> None:
        with self.lock:
            self.woken += 1


def produce_until(producer: Producer, topic: str, partition: int, service: Service, n: int) -> None:
    """Records to (topic, partition) until `service` has been woken `n` times. The watch starts at
    the partition's end, looked up a moment after the poll parks, so the first records may come
    before it; and it wakes a service at most once per round, so `n` more wakes mean `n` rounds."""

    def send_and_look() -> bool:
        producer.produce(topic, b"x", partition=partition)
        producer.flush(10)
        return service.woken >= n

    wait_for(send_and_look, 20, f"{n} wakes for partition {partition}")


def test_a_record_wakes_the_service_that_fetches_its_partition_and_no_other(
    kafka_bootstrap, new_topic
):
    topic = new_topic("arrive", partitions=3)
    first, second = Service(("g1", topic), (topic, 0)), Service(("g2", topic), (topic, 1))
    awaited: set[Key] = {first.key, second.key}
    watch = ArrivalWatch(
        {"bootstrap.servers": kafka_bootstrap}, lambda: [first, second], lambda: tuple(awaited), 10
    )
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0})
    watch.start()
    try:
        produce_until(producer, topic, 0, first, 1)
        assert second.woken == 0  # its partition got nothing
        # Partition 2 is no poll's: its records wake nobody. They are in the partitions' log
        # before the records that wake `second`, so the watch has read them by then, had it
        # watched them.
        for _ in range(5):
            producer.produce(topic, b"y", partition=2)
        produce_until(producer, topic, 1, second, 1)

        # `first`'s poll is answered: partition 0 stays assigned a while, but wakes it no more.
        # Two more wakes of `second` are two rounds, so the second began after the discard, and
        # the rounds that read partition 0's first records have ended.
        awaited.discard(first.key)
        produce_until(producer, topic, 1, second, second.woken + 2)
        settled = first.woken
        for _ in range(5):
            producer.produce(topic, b"z", partition=0)
        produce_until(producer, topic, 1, second, second.woken + 2)
        assert first.woken == settled
    finally:
        watch.stop()
