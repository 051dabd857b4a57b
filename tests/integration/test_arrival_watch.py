"""`revive.arrivals` against a real broker: a record that arrives for a parked long poll wakes
the pop service that fetches its partition, and no other; an idle watch blocks until a poll
parks; a record that came before the watch looked at its partition is reported too."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable

from confluent_kafka import Producer
from kafka_helpers import wait_for

from revive import arrivals
from revive.arrivals import ArrivalWatch
from revive.inbox import Arrivals

Key = tuple[str, str]


class Service:
    """Stands in for a shard's pop service: which partition it fetches for which poll, from
    which offset on, and what the watch told it."""

    def __init__(self, key: Key, partition: tuple[str, int], fetched_to: int = 0) -> None:
        self.key, self.partition, self.fetched_to = key, partition, fetched_to
        self.seen: list[Arrivals] = []
        self.lock = threading.Lock()

    def watched(self, awaited: Iterable[Key]) -> list[tuple[str, int, str, int]]:
        topic, partition = self.partition
        return [(topic, partition, self.key[0], self.fetched_to)] if self.key in awaited else []

    def arrived(self, seen: Arrivals) -> None:
        with self.lock:
            self.seen.append(dict(seen))

    def offsets(self) -> list[int]:
        with self.lock:
            return [offset for seen in self.seen for offset in seen.values()]


def watch_of(bootstrap: str, services: list[Service], awaited: set[Key], parked: threading.Event):
    return ArrivalWatch({"bootstrap.servers": bootstrap}, lambda: services,
                        lambda: tuple(awaited), parked, 10)  # fmt: skip


def send(producer: Producer, topic: str, partition: int, n: int = 1) -> None:
    for _ in range(n):
        producer.produce(topic, b"x", partition=partition)
    producer.flush(10)


def test_a_record_wakes_the_service_that_fetches_its_partition_and_no_other(
    kafka_bootstrap, new_topic, monkeypatch
):
    monkeypatch.setattr(arrivals, "KEEP_S", 60.0)  # longer than this test, however slow
    topic = new_topic("arrive", partitions=3)
    first, second = Service(("g1", topic), (topic, 0)), Service(("g2", topic), (topic, 1))
    awaited: set[Key] = {first.key, second.key}
    parked = threading.Event()
    watch = watch_of(kafka_bootstrap, [first, second], awaited, parked)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0})
    watch.start()
    try:
        parked.set()
        send(producer, topic, 0)
        wait_for(lambda: first.offsets() == [0], 20, "partition 0's record reported")
        assert first.seen == [{("g1", topic, 0): 0}]
        assert second.seen == []  # its partition got nothing
        # Partition 2 is no poll's: its records wake nobody. They are in the log before the
        # record that wakes `second`, so the watch has read them by then, had it watched them.
        send(producer, topic, 2, 5)
        send(producer, topic, 1)
        wait_for(lambda: second.offsets() == [0], 20, "partition 1's record reported")
        assert first.offsets() == [0]

        # `first`'s poll is answered: partition 0 stays watched a while, and its records are
        # still reported, for the service to move them into its lanes for the next pop.
        awaited.discard(first.key)
        send(producer, topic, 0, 3)
        wait_for(lambda: first.offsets()[-1] == 3, 20, "partition 0's later records reported")
        later = first.offsets()[1:]  # one report, or more if the reader's consumes split them
        assert later == sorted(set(later)) and set(later) <= {1, 2, 3}
    finally:
        watch.stop()


def test_an_idle_watch_blocks_until_a_poll_parks(kafka_bootstrap, new_topic):
    """With no poll waiting both of the watch's threads block with no bound, and a poll that
    parks gets its partition watched at once."""
    topic = new_topic("idle", partitions=1)
    service = Service(("g", topic), (topic, 0))
    awaited: set[Key] = set()
    parked = threading.Event()
    watch = watch_of(kafka_bootstrap, [service], awaited, parked)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0})
    watch.start()
    try:
        wait_for(lambda: blocked(watch), 10, "the watch's threads wait: no poll waits")
        awaited.add(service.key)  # as `Availability.waiting` does: the key, then the event
        parked.set()
        send(producer, topic, 0)
        wait_for(lambda: service.offsets() == [0], 10, "the record reported")
    finally:
        watch.stop()


def test_a_record_that_came_before_the_watch_looked_is_reported(kafka_bootstrap, new_topic):
    """The watch reads a partition from where the service's fetcher got to, not from its end: a
    record that arrived after the poll parked but before the watch assigned the partition (here,
    well before) still wakes the service."""
    topic = new_topic("early", partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0})
    send(producer, topic, 0, 3)  # offsets 0..2: the fetcher handed over 0 and 1
    service = Service(("g", topic), (topic, 0), fetched_to=2)
    awaited: set[Key] = {service.key}
    parked = threading.Event()
    watch = watch_of(kafka_bootstrap, [service], awaited, parked)
    watch.start()
    try:
        parked.set()
        wait_for(lambda: service.offsets() == [2], 20, "the record at offset 2 reported")
    finally:
        watch.stop()


def blocked(watch: ArrivalWatch) -> bool:
    """Both threads of the watch wait on an event with no timeout (`Event.wait(None)`)."""
    waiting = 0
    for thread in watch._threads:
        frame = sys._current_frames().get(thread.ident or 0)
        while frame is not None:
            if frame.f_code.co_name == "wait" and frame.f_locals.get("timeout", 0) is None:
                waiting += 1
                break
            frame = frame.f_back
    return waiting == len(watch._threads)


def test_a_partition_let_go_is_watched_again_when_a_poll_parks_on_it(
    kafka_bootstrap, new_topic, monkeypatch
):
    """A partition no poll waited for in KEEP_S is let go; a later park watches it again from
    where its fetcher got to, so a record that came meanwhile is reported too."""
    monkeypatch.setattr(arrivals, "KEEP_S", 0.2)
    topic = new_topic("again", partitions=1)
    service = Service(("g", topic), (topic, 0))
    awaited: set[Key] = {service.key}
    parked = threading.Event()
    watch = watch_of(kafka_bootstrap, [service], awaited, parked)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0})
    watch.start()
    try:
        parked.set()
        send(producer, topic, 0)
        wait_for(lambda: service.offsets() == [0], 20, "the first record reported")
        awaited.clear()
        wait_for(lambda: not watch._assigned, 10, "the partition let go")
        send(producer, topic, 0)  # offset 1, while not watched
        service.fetched_to = 1
        awaited.add(service.key)
        parked.set()
        wait_for(lambda: service.offsets() == [0, 1], 20, "the record sent meanwhile reported")
    finally:
        watch.stop()
