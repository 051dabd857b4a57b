"""Wake a shard's pop service the moment records arrive for a parked long poll.

RocketMQ wakes its long polls from the broker's own arrival listener; kpd, beside a stock
broker, has to watch. A pop service looks for fetched records every 5 ms while a long poll
waits (`revive.service`). That cadence cost a parked poll 5.0-5.5 ms on average between a
record's CreateTime and the look that found it; looking every 0.5 ms instead made it 2.8, but
cost every shard's thread a step per look (one parked poll: 25% of a core instead of 11%;
BENCHMARKS.md, 2026-11-27 18:00).

Here one consumer per worker blocks on the partitions the awaited (group, topic)s are fetched
from by this worker's shards. It starts at their end and wakes the service fetching each one as
soon as a committed record comes (read_committed, like the fetchers). That is one blocking
consume for any number of shards and groups. Its own records are dropped: each service's fetcher
reads its copy. So a record is read twice only while pops park, when the topic is quiet anyway.
The watch only speeds things up: if it stops, the services' own looks still find every record.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Collection, Iterable
from typing import Any, Protocol

import structlog
from confluent_kafka import OFFSET_END, KafkaException, TopicPartition

from foundation.bounded_call import call_within
from foundation.kafka_clients import HELD_FETCH_MS, consume_ready, state_consumer
from foundation.periodic import PeriodicThread
from revive import metrics

log = structlog.get_logger(__name__)

Key = tuple[str, str]  # (group, topic) a long poll waits for
Partition = tuple[str, int]
# How long one round waits for records: also how soon a newly parked poll's partitions are
# watched while others are. With none watched, the watch sleeps until a poll parks (50 rounds a
# second cost an idle worker 0.007-0.009 of a core: BENCHMARKS.md, 2026-11-27 20:47).
ROUND_S = 0.02
IDLE_WAIT_S = 5.0  # and looks anyway this often (a bound: no wake waits for it)
# A partition no poll waits for any more stays assigned this long: a worker popping in a loop
# parks again soon, and each new assignment costs the broker a look-up of the partition's end.
KEEP_S = 5.0
FAILED_WAIT_S = 1.0


class Watched(Protocol):
    """A shard's pop service, as the watch sees it."""

    def watched(self, awaited: Iterable[Key]) -> list[Partition]: ...

    def arrived(self) -> None: ...


class ArrivalWatch(PeriodicThread):
    def __init__(
        self,
        client_config: dict[str, Any],
        services: Callable[[], Iterable[Watched]],  # the pop services this worker runs
        awaited: Callable[[], Collection[Key]],  # the (group, topic)s long polls wait for
        parked: threading.Event,  # set whenever a long poll parks
        timeout_s: float,
    ) -> None:
        # Rounds follow each other at once: a round waits in its consume, and one that read
        # records must not delay the next look.
        super().__init__("arrival watch", every_s=0.0, join_s=timeout_s + 1)
        self._consumer = state_consumer(
            client_config, "kpd-arrival-watch", **{"fetch.wait.max.ms": HELD_FETCH_MS}
        )  # assign() only, never commits
        self._services, self._awaited, self._timeout_s = services, awaited, timeout_s
        self._parked = parked
        self._assigned: dict[Partition, float] = {}  # when a poll last waited for each
        self._known_topics: set[str] = set()

    def tick(self) -> None:
        try:
            self._round()
        except KafkaException as error:  # the broker away: the services' own looks go on
            log.warning("arrival watch failed; trying again", error=str(error))
            self._stop.wait(FAILED_WAIT_S)

    def stop(self) -> None:
        self._stop.set()
        self._parked.set()  # end an idle wait
        super().stop()
        if self._thread.is_alive():
            return  # still in a bounded call: closing under it could crash; the process ends
        # librdkafka's close may hang on a broker that went away: bounded.
        with contextlib.suppress(KafkaException):
            call_within(self._timeout_s, "close", self._consumer.close)

    def _round(self) -> None:
        self._parked.clear()  # a poll parking from here on ends the idle wait below
        wanted = self._wanted()
        self._assign(wanted.keys())
        if not self._assigned:
            self._parked.wait(IDLE_WAIT_S)
            return
        woken: set[Watched] = set()
        for message in consume_ready(self._consumer, 500, ROUND_S):
            if message.error() is None:
                woken.update(wanted.get((message.topic(), message.partition()), ()))
        for service in woken:
            service.inbox.arrived()
        metrics.ARRIVAL_WAKES.inc(len(woken))

    def _wanted(self) -> dict[Partition, list[Watched]]:
        """Each partition a parked poll waits for, with the services that fetch it here."""
        awaited = self._awaited()
        wanted: dict[Partition, list[Watched]] = {}
        if awaited:
            for service in self._services():
                for partition in service.fetchers.watched(awaited):
                    wanted.setdefault(partition, []).append(service)
        return wanted

    def _assign(self, wanted: Collection[Partition]) -> None:
        now = time.monotonic()
        new = [tp for tp in wanted if tp not in self._assigned]
        for topic in {t for t, _ in new} - self._known_topics:
            # Without the topic's metadata at hand, librdkafka looks its partitions' end up only
            # on a 500 ms timer: the records of a park's first second went unwatched.
            self._consumer.list_topics(topic, timeout=self._timeout_s)
            self._known_topics.add(topic)
        if new:  # from their end: what is there already, the fetchers have read or will read
            self._consumer.incremental_assign([TopicPartition(t, p, OFFSET_END) for t, p in new])
        self._assigned.update(dict.fromkeys(wanted, now))
        dropped = [tp for tp, at in self._assigned.items() if now - at > KEEP_S]
        if dropped:
            self._consumer.incremental_unassign([TopicPartition(t, p) for t, p in dropped])
            for tp in dropped:
                del self._assigned[tp]
