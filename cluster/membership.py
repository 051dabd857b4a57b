"""Shard ownership through Kafka group membership (as Kafka Connect, Karapace and Streams do).

Every sidecar worker joins one consumer group subscribed to the election topic, which has one
partition per shard; the group coordinator assigns each partition to exactly one member, and that
member leads the shard. The assignment is cooperative-sticky: a worker joining takes over some
shards while the others keep theirs and never stop; a worker leaving (cleanly: at once; crashed:
after its session timeout) hands its shards to the others.

Membership alone does not stop a paused ex-leader from writing: the transactional producers of
each shard's roles (one fixed transactional.id per shard and role) do, because a new leader's
`init_transactions` fences every older producer with the same id.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import structlog
from confluent_kafka import Consumer, ConsumerGroupState, TopicPartition
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription

log = structlog.get_logger(__name__)

# + the member's HTTP address, for others to forward calls to, and its place: its index among its
# sidecar's workers and the sidecar's own address (`Owners` orders the ring of members by them).
CLIENT_PREFIX = "kpd-member "
POLL_S = 0.25  # a poll serves the group's callbacks as they come; this bounds a pause or a stop


@dataclass(frozen=True)
class Member:
    member_id: str
    url: str
    shards: frozenset[int]
    index: int = 0  # among its sidecar's workers
    sidecar: str = ""  # the address its sidecar's workers share ("": a member before places)

    @property
    def home(self) -> str:
        """The sidecar it runs in: its workers die together when the machine does."""
        return self.sidecar or self.url


def client_id(url: str, index: int, sidecar: str) -> str:
    return f"{CLIENT_PREFIX}{url} {index} {sidecar}"


def member_of(member_id: str, client: str, shards: frozenset[int]) -> Member | None:
    """A member from its client id (None: not a kpd worker). A worker of a version before
    places gave its address alone: it counts as a sidecar of one worker."""
    if not client.startswith(CLIENT_PREFIX):
        return None
    url, *place = client[len(CLIENT_PREFIX) :].split(" ")
    if len(place) == 2 and place[0].isascii() and place[0].isdigit():
        return Member(member_id, url, shards, int(place[0]), place[1])
    return Member(member_id, url, shards, 0, url)


class Membership:
    """Keeps this worker in the group; `owned` is the set of shards it leads right now."""

    def __init__(
        self,
        client_config: dict[str, object],
        topic: str,
        session_timeout_ms: int,
        advertised_url: str,
        place: tuple[int, str],  # this worker's index among its sidecar's, the sidecar's address
    ) -> None:
        self.group = topic
        self.url = advertised_url
        self.session_timeout_s = session_timeout_ms / 1000
        self._consumer = Consumer(
            {
                **client_config,
                "client.id": client_id(advertised_url, *place),
                "group.id": topic,
                "session.timeout.ms": session_timeout_ms,
                "heartbeat.interval.ms": max(100, session_timeout_ms // 4),
                "enable.auto.commit": False,
                # Sticky: a worker joining takes shards over without stopping the others.
                "partition.assignment.strategy": "cooperative-sticky",
            }
        )
        self._topic = topic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="membership", daemon=True)
        self.owned: frozenset[int] = frozenset()
        self.paused = False  # set: leave the group (lead nothing) until cleared
        self._subscribed = False
        self._joined_at = 0.0  # when it last subscribed (joined or began to)
        self.assigned_once = False  # the group has answered: shard owners are known
        self.changed = threading.Event()  # set on every change of `owned`
        # Called with the shards a rebalance takes away, before this worker rejoins (the group
        # gives them to another member only then): the process waits there until no role of
        # theirs may fence their next owner any more (`Conductor.await_released`).
        self.on_revoked: Callable[[frozenset[int]], bool] = lambda _: True

    def start(self) -> None:
        self._thread.start()

    def describe(self, admin: AdminClient, request_timeout_s: float) -> Future[Any]:
        """Ask the group's coordinator for the group's members (`members` reads the answer)."""
        futures = admin.describe_consumer_groups([self.group], request_timeout=request_timeout_s)
        return futures[self.group]

    def members(self, description: ConsumerGroupDescription) -> list[Member]:
        """Every member of the group with its HTTP address and the shards it holds."""
        found = []
        for member in description.members:
            assignment = member.assignment.topic_partitions if member.assignment else []
            shards = frozenset(tp.partition for tp in assignment if tp.topic == self._topic)
            found.append(member_of(member.member_id, member.client_id, shards))
        return [member for member in found if member is not None]

    def stable(self, description: ConsumerGroupDescription) -> bool:
        """Is the group between rebalances? While one prepares, the coordinator describes the
        members with the shards they held before it: a member just joined holds none, while
        the others still hold every shard."""
        return bool(description.state == ConsumerGroupState.STABLE)

    def joined_s(self) -> float:
        """How long ago this worker last subscribed (0 while it is out of the group)."""
        return max(0.0, time.monotonic() - self._joined_at) if self._subscribed else 0.0

    def stop(self) -> None:
        """Leave the group (hands the shards over at once) after giving them up here."""
        self._stop.set()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                if self.paused and self._subscribed:
                    self._leave()
                elif not self.paused and not self._subscribed:
                    self._rejoin()
                self._consumer.poll(POLL_S)  # records are not read
        finally:
            self._set(frozenset())
            self._consumer.close()

    def _rejoin(self) -> None:
        self._consumer.subscribe(
            [self._topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost
        )
        self._joined_at = time.monotonic()
        self._subscribed = True

    def _leave(self) -> None:
        self._consumer.unsubscribe()
        self._subscribed = False
        self._set(frozenset())

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Assigned here (else the client does it after this callback) to be paused at once: the
        # election topic's records are never read, and an assigned partition is fetched on
        # every `fetch.wait.max.ms` while it stays empty.
        consumer.incremental_assign(partitions)
        if partitions:
            consumer.pause(partitions)
        self.assigned_once = True
        self._set(self.owned | {tp.partition for tp in partitions})

    def _revoked(self, _: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = frozenset(tp.partition for tp in partitions)
        self._set(self.owned - revoked)
        if not revoked or self._stop.is_set():  # stopping: the conductor waits for this thread
            return
        began = time.monotonic()
        released = self.on_revoked(revoked)
        waited_ms = round((time.monotonic() - began) * 1000)
        log.info("revoked shards released", shards=sorted(revoked), waited_ms=waited_ms)
        if not released:
            log.warning("revoked shards' roles still fencing; rejoining", shards=sorted(revoked))

    def _lost(self, _: Consumer, partitions: list[TopicPartition]) -> None:
        self._set(frozenset())

    def _set(self, owned: frozenset[int]) -> None:
        if owned != self.owned:
            log.info("shards assigned", owned=sorted(owned), was=sorted(self.owned))
        self.owned = owned
        self.changed.set()
