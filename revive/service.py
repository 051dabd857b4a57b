"""The pop service of one shard while this sidecar leads it: leases, acks, revive, retry, DLQ.

One supervised thread owns the shard's pop state. HTTP handlers hand it requests through its
inbox (`revive.inbox`) and wait on futures; the thread serves every request that arrived
meanwhile in one Kafka transaction (group commit), together with the revive of expired leases and
the commit of the replay floor, and answers only after the commit; each group's offsets follow in
a transaction of their own (`revive.offsets`). So a pop is answered only once its checkpoint
record is durable, an ack only once its ack record is, and a retry copy exists exactly when the
delivery it replaces is marked settled. A pop here never waits: long polling is the router's
(`cluster.routing.pop_router`), which `on_available` wakes when lanes of a (group, topic) receive
records. Between steps the thread sleeps until a request or a wake comes (`revive.inbox`), or until
its next deadline: a lease ending, a group's offsets due, the replay floors to look at after a
change. An idle shard does no work at all.

The parts, one job each: `request_server` (each request by its kind), `group_fetchers` (the
groups' lanes read), `lease` (pop), `settle` (ack, nack, leases, reject, expiry), `copier`
(retry and dead-letter copies), `offsets` (committed offsets), `replay_floors` + `pop_state`
(the ledgers a new leader rebuilds from the replay floor, so leases granted before a restart
are honoured and acked messages never return).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import structlog

from foundation.config import Settings
from foundation.kafka_clients import transactional_producer
from foundation.producers_in_turn import ProducersInTurn
from foundation.shards import ShardMap
from foundation.supervision import LoopHealth
from foundation.topics import TopicCache
from revive import metrics
from revive.copier import Copier
from revive.deleted_topics import DeletedTopics
from revive.group_fetchers import GroupFetchers, Watched
from revive.held_records import HELD_RECORD_BYTES, HeldRecords
from revive.inbox import Arrivals, RequestInbox
from revive.lease import Leaser
from revive.offsets import OffsetCommitter, OffsetSender
from revive.pop_follower import Handover
from revive.pop_state import PopState, orders_by_key
from revive.pop_step import PopStep, Unwritten
from revive.reader import OffsetReader
from revive.receipt import ReceiptCodec
from revive.replay_floors import ReplayFloors
from revive.request_server import RequestServer
from revive.requests import (
    AckProduceRequest,
    ForgetRequest,
    Look,
    PopRequest,
    Request,
    SeekRequest,
    SettleRequest,
)
from revive.seek import Seeker
from revive.settle import Settler
from revive.stats import group_stats
from revive.wake_times import FLOOR_EVERY_S, WakeTimes

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class PopDeps:
    """What every shard's pop service of one process shares."""

    settings: Settings
    client_config: dict[str, Any]
    producer_config: dict[str, Any]
    admin: Any
    codec: ReceiptCodec
    shards: ShardMap
    on_available: Callable[[str, str], None]  # (group, topic): records arrived for it
    awaited: Callable[[], bool]  # does a long poll of this worker wait for records?


class PopService:
    def __init__(
        self, deps: PopDeps, shard: int, health: LoopHealth, handover: Handover | None = None
    ) -> None:
        settings = deps.settings
        self.shard = shard
        self._deps, self._settings, self._health = deps, settings, health
        self._timeout_s = settings.kafka_timeout_ms / 1000
        self.state_topic = settings.state_topic("pop-state")
        self._inbox = RequestInbox()
        self._producers = ProducersInTurn(
            lambda txn_id: transactional_producer(deps.producer_config, txn_id),
            settings.state_topic(f"pop-leader-{shard}"),
            fencing=health.fencing,
        )
        self._reader = OffsetReader(deps.client_config, self._timeout_s)
        self._floors = ReplayFloors(
            deps.client_config, (self.state_topic, settings.state_topic("pop-floor")),
            deps.shards.partitions(shard), self._timeout_s,
        )  # fmt: skip
        self._wakes = WakeTimes()
        self._admin = deps.admin
        self._topic_cache = TopicCache(deps.admin, self._timeout_s, recheck_known_s=FLOOR_EVERY_S)
        # A standby's hot state of this shard, if it had one: only its tail is left to read.
        self._handover = handover
        self.state = (
            handover[0] if handover is not None else PopState(deps.shards, orders_by_key(settings))
        )
        self._held = HeldRecords(HELD_RECORD_BYTES)
        self._unwritten = Unwritten()  # memory leases' records, for the next transaction
        self._held_bytes = metrics.HELD_BYTES.labels(str(shard))
        self._leaser = Leaser(settings, self.state, deps.codec, self._held)
        self._settler = Settler(settings, self.state)
        self._offsets = OffsetCommitter(self.state)
        self._fetchers = GroupFetchers(
            settings, (deps.client_config, deps.admin), (deps.shards, shard), self.state,
            self._topic_cache, self._inbox.wake,
        )  # fmt: skip
        self._copier = Copier(
            settings, self.state, self._reader, self._held, self._fetchers.seek_stamp
        )
        self._seeker = Seeker(self.state, self._copier, self._offsets, self._timeout_s)
        self._deleted = DeletedTopics(self._fetchers, self.state, self._unwritten, self._offsets)
        self._offset_sender = OffsetSender(
            self._producers, self._timeout_s, self._topic_cache.exists_now
        )
        self._requests = RequestServer(
            self.state, (self._leaser, self._settler, self._seeker),
            (self._fetchers, self._offsets, self._unwritten), deps.on_available,
            self._wakes.floors_may_move,
        )  # fmt: skip

    # -- the face callers use, from any thread; requests go through the inbox ------------

    def lease(self, group: str, topic: str, wanted: int, invisible_ms: int) -> Future[Any]:
        """Up to `wanted` records of (group, topic) that are here now, leased (waiting for
        records is the caller's job)."""
        return self._inbox.submit(PopRequest(group, topic, wanted, invisible_ms))

    def start_reading(self, group: str, topic: str) -> Future[Any]:
        """Read (group, topic) here from now on: a lease of nothing, as a first pop would."""
        return self.lease(group, topic, 0, 1_000)  # any valid lease time: none is made

    def settle(self, request: SettleRequest | AckProduceRequest) -> Future[Any]:
        return self._inbox.submit(request)

    def seek(self, request: SeekRequest) -> Future[Any]:
        """Move the group's position in the topic's partitions served here (`revive.seek`)."""
        return self._inbox.submit(request)

    def forget(self, request: ForgetRequest) -> Future[Any]:
        """Forget a deleted group here (`revive.forget`)."""
        return self._inbox.submit(request)

    def reads(self, group: str, topic: str) -> bool:
        """Has (group, topic) been asked for here, so that its lanes are read?"""
        return self._fetchers.knows(group, topic)

    def available(self, group: str, topic: str) -> int:
        """Records waiting in the lanes for pops of (group, topic). Called on the event loop."""
        return self._fetchers.available(group, topic)

    def worth_asking(self, group: str, topic: str) -> bool:
        return self._fetchers.worth_asking(group, topic)

    def watched(self, awaited: Iterable[tuple[str, str]]) -> list[Watched]:
        """For the arrival watch: the partitions read here for parked (group, topic)s."""
        return self._fetchers.watched(awaited)

    def arrived(self, seen: Arrivals) -> None:
        """The arrival watch saw records for parked polls: fetch until the lanes have them."""
        self._inbox.arrived(seen)

    def stats(self, group: str) -> dict[str, Any]:
        """The group's numbers here, once the lanes hold what was fetched (an idle shard's
        thread sleeps: nothing moves records in meanwhile)."""
        with contextlib.suppress(Exception):  # a shard that does not answer: its lanes as they are
            self._inbox.submit(Look()).result(timeout=self._timeout_s)
        fetcher = self._fetchers.by_group.get(group)
        return group_stats(fetcher, self.state, group, self._admin, self._timeout_s)

    # -- the service thread ----------------------------------------------------------------

    def start(self) -> None:
        """Fence older leaders of this shard, then rebuild its ledgers from the replay floor."""
        self._producers.init_transactions(self._timeout_s)
        at = self._handover[1] if self._handover is not None else {}
        read = self._floors.replay(self.state, at, self._health.beat)
        self._fetchers.resume()
        log.info(
            "pop service started", shard=self.shard, ledgers=len(self.state.ledgers), read=read,
            hot=self._handover is not None,
        )  # fmt: skip

    def wake(self) -> None:
        """End the wait between steps (the supervisor's stop)."""
        self._inbox.wake()

    def step(self) -> None:
        """Serve what arrived (waiting for it until the next deadline), revive, commit, answer;
        then commit the group offsets that are due (`revive.offsets`)."""
        with self._health.waiting():
            requests = self._inbox.drain(self._wait_s())
        step = PopStep(
            self._producers, self._timeout_s, self._settings.delivery_log_topic,
            self._settings.node_id, self._unwritten,
        )  # fmt: skip
        try:
            unsent = self._serve(requests, step)
        except BaseException:
            # Memory may now be ahead of the log: the supervisor rebuilds the role from Kafka.
            for _, future in requests:
                if not future.done():
                    future.set_exception(RuntimeError("the pop service is restarting"))
            raise
        for future, answer in step.answers:
            future.set_result(answer)
        self._fetchers.look_at_ordered(self._deps.on_available)
        self._offsets.touch(step.groups | self._fetchers.take_skipping())
        if step.txn.used:
            self._wakes.floors_may_move()
        if unsent or self._offsets.due():
            self._send_offsets(unsent)

    def _wait_s(self) -> float | None:
        return self._wakes.wait_s(
            self._offsets.next_due(), self._inbox.looking(), self._deps.awaited()
        )

    def _serve(self, requests: list[tuple[Request, Future[Any]]], step: PopStep) -> set[str]:
        """Serve and commit the step; the groups whose watermark was never committed here."""
        if self._fetchers.install_resumed():
            self._wakes.floors_may_move()
        self._deleted.look()
        self._fetch(*self._inbox.take_arrivals())
        self._requests.serve(requests, step)
        self._wakes.expiry_ms = self._settler.expire(step)
        for fetcher in self._fetchers.by_group.values():
            self._leaser.dead_letter_unpoppable(fetcher, step)
        floors, unsent = self._floors_moved()
        if step.txn.open or floors:
            self._copier.write(step)
            step.write_records(self.state_topic, self.state)
            self._floors.send(step.txn, floors)
            step.txn.commit()
            self._floors.sent(floors)
            self._held.drop(step.settled)  # their copies, if any, are written
            self._held_bytes.set(self._held.bytes)
        return unsent

    def _send_offsets(self, unsent: set[str]) -> None:
        """Commit the moved watermarks of the groups due and of `unsent`, from the state the
        step just made durable; a deleted topic found on the way is dropped."""
        deleted = self._offsets.send_due(self._offset_sender, self._fetchers.by_group, unsent)
        self._wakes.floors_may_move()
        for group, topics in deleted.items():
            self._deleted.drop(group, topics)

    def _floors_moved(self) -> tuple[dict[int, int], set[str]]:
        """The replay floors that moved and the groups with a watermark never committed here, at
        most once a second and only after a change (each look costs a scan of the ledgers): both
        go in this step's transaction."""
        if not self._wakes.look_at_floors():
            return {}, set()
        moved = self._floors.moved(
            self.state, lambda key: self._offsets.committed(self._fetchers.by_group, key)
        )
        return moved, self._offsets.unsent(self._fetchers.by_group)

    def close(self) -> None:
        for _, future in self._inbox.drain(0):
            if not future.done():
                future.set_exception(RuntimeError("this sidecar stopped leading"))
        self._fetchers.close()
        self._reader.close()
        self._floors.close()
        self._producers.release()
        self._held_bytes.set(0)

    def _fetch(self, arrivals: Arrivals, fresh: bool) -> None:
        """Move what the fetchers have into lanes, waiting briefly for the records the arrival
        watch saw just now (`GroupFetchers.fetch_all`); look again soon for those still to come."""
        moved, behind = self._fetchers.fetch_all(arrivals, fresh, self._deps.on_available)
        if moved:  # a watermark may exist now where none did: a group's first offsets
            self._wakes.floors_may_move()
        self._inbox.still_behind(behind)
