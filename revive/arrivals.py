"""Wake a shard's pop service the moment records arrive for a parked long poll.

RocketMQ wakes its long polls from the broker's own arrival listener; kpd, beside a stock
broker, has to watch. One consumer per worker reads the partitions that parked polls wait for,
fetched by this worker's shards, and tells the service fetching each what it saw there
(`RequestInbox.arrived`): that one consume blocks for any number of shards and groups, and the
services sleep meanwhile. Its records are dropped: each service's fetcher reads its own copy,
waiting for it once told (`GroupFetcher.fetch`). So a record is read twice only while polls
park, when the topic is quiet anyway.

Two threads, each blocking on its own input: the reader on the consumer, the assigner on polls
parking (an event) and on the next partition to let go. The assigner starts each partition where
the fetcher of its group has got to (`GroupFetcher.next_offset`), not at its end: a record that
came between a poll's park and the assignment is then seen too, so none is missed. A partition
stays watched while polls park on it and KEEP_S after, and its records are reported all that
time: one that comes between two polls is in the lanes by the next.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Collection, Iterable
from typing import Any, Protocol

import structlog
from confluent_kafka import KafkaException, Message, TopicPartition

from foundation.bounded_call import call_within
from foundation.kafka_clients import HELD_FETCH_MS, consume_ready, state_consumer
from revive import metrics
from revive.group_fetchers import Watched
from revive.inbox import Arrivals

log = structlog.get_logger(__name__)

Key = tuple[str, str]  # (group, topic) a long poll waits for
Partition = tuple[str, int]
READ_S = 1.0  # the reader's consume: the bound of a stop
# A partition no poll waits for any more stays assigned this long: a worker popping in a loop
# parks again soon, and each new assignment costs the broker a look-up.
KEEP_S = 5.0
FAILED_WAIT_S = 1.0


class Service(Protocol):
    """A shard's pop service, as the watch sees it."""

    def watched(self, awaited: Iterable[Key]) -> list[Watched]: ...

    def arrived(self, seen: Arrivals) -> None: ...


class ArrivalWatch:
    def __init__(
        self,
        client_config: dict[str, Any],
        services: Callable[[], Iterable[Service]],  # the pop services this worker runs
        awaited: Callable[[], Collection[Key]],  # the (group, topic)s long polls wait for
        parked: threading.Event,  # set whenever a long poll parks
        timeout_s: float,
    ) -> None:
        self._consumer = state_consumer(
            client_config, "kpd-arrival-watch", **{"fetch.wait.max.ms": HELD_FETCH_MS}
        )  # assign() only, never commits
        self._services, self._awaited, self._timeout_s = services, awaited, timeout_s
        self._parked = parked
        self._stop = threading.Event()
        # Each partition ever watched: the services fetching it and for which group. Replaced
        # whole by the assigner, read by the reader.
        self._wanted: dict[Partition, list[tuple[Service, str]]] = {}
        self._assigned: dict[Partition, float] = {}  # when a poll last waited for each
        self._to_drop: set[Partition] = set()  # let go, for the reader to unassign
        self._lock = threading.Lock()
        self._known_topics: set[str] = set()
        self._has_assignment = threading.Event()
        self._threads = [
            threading.Thread(target=self._loop, args=(self._read,), name="arrival reader"),
            threading.Thread(target=self._loop, args=(self._assign,), name="arrival assigner"),
        ]
        for thread in self._threads:
            thread.daemon = True

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._parked.set()
        self._has_assignment.set()
        for thread in self._threads:
            thread.join(timeout=self._timeout_s + 1)
        if any(thread.is_alive() for thread in self._threads):
            return  # still in a bounded call: closing under it could crash; the process ends
        # librdkafka's close may hang on a broker that went away: bounded.
        with contextlib.suppress(KafkaException):
            call_within(self._timeout_s, "close", self._consumer.close)

    def _loop(self, turn: Callable[[], None]) -> None:
        while not self._stop.is_set():
            try:
                turn()
            except KafkaException as error:  # the broker away: the services' own looks go on
                log.warning("arrival watch failed; trying again", error=str(error))
                self._stop.wait(FAILED_WAIT_S)
            except Exception:
                log.exception("arrival watch failed; trying again")
                self._stop.wait(FAILED_WAIT_S)

    # -- the reader ------------------------------------------------------------------------

    def _read(self) -> None:
        if not self._assigned:
            self._has_assignment.wait()
            self._has_assignment.clear()
            return
        messages = consume_ready(self._consumer, 500, READ_S)
        if messages:
            self._wake(messages)
        with self._lock:  # what the assigner let go, on this thread: see `_assign`
            dropped, self._to_drop = self._to_drop, set()
            if dropped:
                self._consumer.incremental_unassign([TopicPartition(t, p) for t, p in dropped])
                for tp in dropped:
                    del self._assigned[tp]

    def _wake(self, messages: list[Message]) -> None:
        """Tell each service what came on the partitions it fetches; also while no poll waits
        for them (their partitions stay watched KEEP_S): it moves the records into its lanes,
        where the next pop finds them."""
        wanted = self._wanted
        seen: dict[Service, Arrivals] = {}
        for message in messages:
            if message.error() is not None:
                continue
            topic, partition = message.topic(), message.partition()
            for service, group in wanted.get((topic, partition), ()):
                seen.setdefault(service, {})[(group, topic, partition)] = message.offset()
        for service, arrivals in seen.items():
            service.arrived(arrivals)
        metrics.ARRIVAL_WAKES.inc(len(seen))

    # -- the assigner ----------------------------------------------------------------------

    def _assign(self) -> None:
        """Watch what parked polls wait for, from where their fetchers got to; let go of what
        none waited for in KEEP_S. Of the consumer's calls only an assignment is made here,
        while the reader consumes: a pause or an unassign from this thread waits for the
        reader's consume, which waits for the GIL this thread holds meanwhile (it hung)."""
        self._parked.clear()  # a poll parking from here on ends the wait below
        now = time.monotonic()
        wanted: dict[Partition, list[tuple[Service, str]]] = {}
        start: dict[Partition, int] = {}
        awaited = self._awaited()
        if awaited:
            for service in self._services():
                for topic, partition, group, offset in service.watched(awaited):
                    wanted.setdefault((topic, partition), []).append((service, group))
                    start[(topic, partition)] = min(offset, start.get((topic, partition), offset))
        with self._lock:
            self._to_drop -= start.keys()  # waited for again before the reader let it go
            new = [tp for tp in start if tp not in self._assigned]
            for topic in {t for t, _ in new} - self._known_topics:
                # Without the topic's metadata at hand, librdkafka looks a partition's offsets
                # up only on a 500 ms timer.
                self._consumer.list_topics(topic, timeout=self._timeout_s)
                self._known_topics.add(topic)
            self._wanted = {**self._wanted, **wanted}
            if new:
                assigned = [TopicPartition(t, p, start[(t, p)]) for t, p in new]
                self._consumer.incremental_assign(assigned)
            self._assigned.update(dict.fromkeys(start, now))
            self._to_drop |= {tp for tp, at in self._assigned.items() if now - at > KEEP_S}
            release = self._next_release_s(now)
        if new:
            self._has_assignment.set()
        self._parked.wait(release)

    def _next_release_s(self, now: float) -> float | None:
        """Until the first watched partition is let go: KEEP_S after a poll last waited for it,
        looked at again then (a poll still waiting keeps it); None: none is watched."""
        kept = [at for tp, at in self._assigned.items() if tp not in self._to_drop]
        return max(min(kept) + KEEP_S - now, 0.0) + 0.01 if kept else None
