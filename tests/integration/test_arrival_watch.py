"""`revive.arrivals` against a real broker: a record that arrives for a parked long poll wakes
the pop service that fetches its partition, and no other."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterable

from confluent_kafka import Producer
from kafka_helpers import wait_for

from revive.arrivals import IDLE_WAIT_S, ArrivalWatch

Key = tuple[str, str]


class Service:
    """Stands in for a shard's pop service: which partitions it fetches for which polls."""

    def __init__(self, key: Key, partition: tuple[str, int]) -> None:
        self.key, self.partition = key, partition
        self.fetchers = self.inbox = self  # what the watch asks of a service's parts
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
    watch = ArrivalWatch({"bootstrap.servers": kafka_bootstrap}, lambda: [first, second],
                         lambda: tuple(awaited), threading.Event(), 10)  # fmt: skip
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


def test_an_idle_watch_sleeps_until_a_poll_parks(kafka_bootstrap, new_topic):
    """With no poll waiting the watch sleeps (up to `IDLE_WAIT_S`), and a poll that parks wakes
    it at once: its partition is watched long before that bound."""
    topic = new_topic("idle", partitions=1)
    service = Service(("g", topic), (topic, 0))
    awaited: set[Key] = set()
    parked = threading.Event()
    watch = ArrivalWatch({"bootstrap.servers": kafka_bootstrap}, lambda: [service],
                         lambda: tuple(awaited), parked, 10)  # fmt: skip
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0})
    watch.start()
    try:
        wait_for(lambda: watch_is_idle(watch), 10, "the watch sleeps: no poll waits")
        awaited.add(service.key)  # as `Availability.waiting` does: the key, then the event
        parked.set()
        started = time.monotonic()
        produce_until(producer, topic, 0, service, 1)
        assert time.monotonic() - started < IDLE_WAIT_S / 2
    finally:
        watch.stop()


def watch_is_idle(watch: ArrivalWatch) -> bool:
    """The watch's thread sleeps in its round (an event's wait called by `_round`)."""
    frame = sys._current_frames().get(watch._thread.ident or 0)
    while frame is not None and frame.f_back is not None:
        if frame.f_code.co_name == "wait" and frame.f_back.f_code.co_name == "_round":
            return True
        frame = frame.f_back
    return False
