"""The pop service of one shard while this sidecar leads it: leases, acks, revive, retry, DLQ.

One supervised thread owns the shard's pop state. HTTP handlers hand it requests through a queue
and wait on futures; the thread serves every request that arrived meanwhile in one Kafka
transaction (group commit), together with the revive of expired leases and the commit of the
replay floor, and answers only after the commit; each group's offsets follow in a transaction of
their own (`revive.offsets`). So a pop is answered only once its checkpoint record is durable,
an ack only once its ack record is, and a retry copy exists exactly when the delivery it
replaces is marked settled. A pop here never waits: long polling is the router's
(`api.pop_router`), which `on_available` wakes when lanes of a (group, topic) receive records.

The parts, one job each: `lease` (pop), `settle` (ack, nack, leases, reject, expiry), `copier`
(retry and dead-letter copies), `offsets` (committed offsets), `replay` + `pop_state` (the
ledgers a new leader rebuilds from the replay floor, so leases granted before a restart are
honoured and acked messages never return).
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import structlog
from confluent_kafka import TopicPartition

from foundation.clock import now_ms
from foundation.config import Settings
from foundation.kafka_clients import transactional_producer
from foundation.producers_in_turn import ProducersInTurn
from foundation.shards import ShardMap
from foundation.supervision import LoopHealth
from foundation.topics import TopicCache, TopicSpec, ensure_topics, with_message_limit
from revive import metrics
from revive.copier import Copier
from revive.fetcher import UNTRUSTED, GroupFetcher, origin_topic, source_topic
from revive.held_records import HeldRecords
from revive.lease import Leaser
from revive.offsets import OffsetCommitter, OffsetSender
from revive.pop_follower import Handover
from revive.pop_state import PopState
from revive.pop_step import PopStep
from revive.reader import OffsetReader
from revive.receipt import ReceiptCodec
from revive.replay import PopStateReader
from revive.requests import PopRequest, SettleRequest
from revive.resume import GroupResumer
from revive.settle import Settler
from revive.stats import group_stats

log = structlog.get_logger(__name__)

# How often the thread looks for new records between requests: often while a long poll of this
# worker waits for some (it must wake as soon as they arrive), rarely while none does, since a pop
# moves what was fetched into the lanes itself; and when the next lease ends. Every idle shard
# woke 200 times a second: about 0.15 of a core per worker with 8 shards and nothing to do
# (BENCHMARKS.md, 2026-11-25 21:00); 20 times a second, some 0.01 (2026-11-26 10:45).
IDLE_WAIT_S = 0.005
QUIET_WAIT_S = 0.25
# Once `revive.arrivals` saw records come for a long poll, the thread looks this often for a
# moment: the fetcher's own copy of them may come a little after the watch's.
ARRIVAL_WAIT_S = 0.0005
ARRIVAL_LOOK_S = 0.01
# What the leader holds of the records it handed out, for nacks and expiries to copy without
# reading them back (`revive.held_records`): some 50k leases of 300-byte records per shard.
HELD_RECORD_BYTES = 16 * 1024 * 1024
FLOOR_EVERY_S = 1.0  # how often replay floors and never-committed watermarks are looked for
RESUME_THREADS = 8  # inherited groups whose fetchers are made at once (`revive.resume`)
Request = PopRequest | SettleRequest
WAKE: tuple[Any, Any] = (None, None)  # queued by `wake`: a step, with nothing to answer


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
        self._queue: queue.Queue[tuple[Request, Future[Any]]] = queue.Queue()
        self._fetchers: dict[str, GroupFetcher] = {}
        self._producers = ProducersInTurn(
            lambda txn_id: transactional_producer(deps.producer_config, txn_id),
            settings.state_topic(f"pop-leader-{shard}"),
        )
        self._reader = OffsetReader(deps.client_config, self._timeout_s)
        self._floor = PopStateReader(
            deps.client_config, self.state_topic, settings.state_topic("pop-floor"),
            self._timeout_s,
        )  # fmt: skip
        self._partitions = deps.shards.partitions(shard)
        self._checked_at = 0.0  # when floors and unsent watermarks were last looked for
        self._topics_checked_at = 0.0  # when the fetched topics were last seen to exist
        self._topic_cache = TopicCache(deps.admin, self._timeout_s, recheck_known_s=FLOOR_EVERY_S)
        self._floors_sent: dict[int, int] = {}
        self._next_expiry_ms: int | None = None  # when the next lease may end
        self._look_often_until = 0.0  # monotonic; see `arrived`
        # The fetchers of the groups the replayed ledgers name, made off this thread.
        self._resumer: GroupResumer[GroupFetcher] = GroupResumer(RESUME_THREADS)
        # A standby's hot state of this shard, if it had one: only its tail is left to read.
        self._handover = handover
        self.state = handover[0] if handover is not None else PopState(deps.shards)
        self._held = HeldRecords(HELD_RECORD_BYTES)
        self._held_bytes = metrics.HELD_BYTES.labels(str(shard))
        self._leaser = Leaser(self.state, deps.codec, self._held)
        self._settler = Settler(settings, self.state)
        self._copier = Copier(settings, self.state, self._reader, self._held)
        self._offsets = OffsetCommitter(self.state)
        self._offset_sender = OffsetSender(
            self._producers, self._timeout_s, self._topic_cache.exists_now
        )

    # -- called from HTTP handlers (any thread) --------------------------------------------

    def submit(self, request: Request) -> Future[Any]:
        future: Future[Any] = Future()
        self._queue.put((request, future))
        return future

    def wake(self) -> None:
        """A long poll starts waiting: look for records at once, and often from now on."""
        self._queue.put(WAKE)

    def arrived(self) -> None:
        """Records came for a parked long poll (`revive.arrivals`): look now, then often for a
        moment."""
        self._look_often_until = time.monotonic() + ARRIVAL_LOOK_S
        self._queue.put(WAKE)

    def watched(self, awaited: Iterable[tuple[str, str]]) -> list[tuple[str, int]]:
        """The partitions this shard reads for the awaited (group, topic)s (from any thread)."""
        found: list[tuple[str, int]] = []
        for group, topic in awaited:
            fetcher = self._fetchers.get(group)
            if fetcher is not None and topic in fetcher.topics:
                found += fetcher.partitions_of(topic)
        return found

    def knows(self, group: str, topic: str) -> bool:
        """Has this shard been asked for (group, topic), so that it reads its lanes?"""
        fetcher = self._fetchers.get(group)
        return fetcher is not None and topic in fetcher.topics

    def available(self, group: str, topic: str) -> int:
        """Records waiting for pops of (group, topic) here (read from another thread)."""
        fetcher = self._fetchers.get(group)
        return 0 if fetcher is None else fetcher.available(topic)

    def stats(self, group: str) -> dict[str, Any]:
        return group_stats(self._fetchers.get(group), self.state, group, self._timeout_s)

    # -- the service thread ----------------------------------------------------------------

    def start(self) -> None:
        """Fence older leaders of this shard, then rebuild its ledgers from the replay floor."""
        self._producers.init_transactions(self._timeout_s)
        at = self._handover[1] if self._handover is not None else {}
        self._floor.assign(at, [p for p in self._partitions if p not in at])
        read = self._floor.replay_to_end(self.state, self._health.beat)
        self._resume_groups()
        log.info(
            "pop service started", shard=self.shard, ledgers=len(self.state.ledgers), read=read,
            hot=self._handover is not None,
        )  # fmt: skip

    def _resume_groups(self) -> None:
        """Fetch the groups the replayed ledgers name, before any worker asks for them: this
        leader may settle their leases (expiry) and must then move the group's offsets, or the
        replay floor could never pass their checkpoints (`PopState.floors`). Their fetchers are
        made in parallel (`revive.resume`), so a takeover answers at once however many groups
        there are. The ledgers of a deleted topic go: nothing of it can be fetched or settled
        again, and they would hold the floor."""
        inherited: dict[str, set[str]] = {}
        for group, lane, _ in self.state.ledgers:
            topic = origin_topic(lane)
            # A distrusted retry lane names no topic: any fetcher of its group reads its retry
            # topic.
            if topic != UNTRUSTED:
                inherited.setdefault(group, set()).add(topic)
        for group, topics in inherited.items():
            for topic in sorted(t for t in topics if not self._topic_cache.exists(t)):
                topics.discard(topic)
                self.state.drop(
                    {k for k in self.state.ledgers if k[0] == group and origin_topic(k[1]) == topic}
                )
                log.warning("dropped the leases of a deleted topic", group=group, topic=topic)
        self._resumer.start({g: t for g, t in inherited.items() if t}, self._made_fetcher)

    def _made_fetcher(self, group: str, topics: set[str]) -> GroupFetcher:
        """(In a resumer thread.) A fetcher of `group` reading `topics`, not yet installed."""
        fetcher = self._new_fetcher(group)
        try:
            for topic in sorted(topics):
                fetcher.add_topic(topic, self._timeout_s)
        except BaseException:
            fetcher.close()
            raise
        return fetcher

    def step(self) -> None:
        """Serve what arrived (waiting briefly if nothing did), revive, commit, answer; then
        commit the group offsets that are due (`revive.offsets`)."""
        requests = self._drain()
        step = PopStep(
            self._producers, self._timeout_s, self._settings.delivery_log_topic,
            self._settings.node_id,
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
        self._offsets.touch(step.groups)
        if unsent or self._offsets.due():
            self._send_offsets(unsent)

    def _serve(self, requests: list[tuple[Request, Future[Any]]], step: PopStep) -> set[str]:
        """Serve and commit the step; the groups whose watermark was never committed here."""
        self._resumer.install_ready(self._fetchers.__setitem__)
        self._forget_deleted_topics()
        self._fetch()
        for request, future in requests:
            if isinstance(request, PopRequest):
                self._pop(request, future, step)
            else:
                step.answers.append((future, self._settler.settle(request, step)))
        self._next_expiry_ms = self._settler.expire(step)
        for fetcher in self._fetchers.values():
            self._leaser.dead_letter_untrusted(fetcher, step)
        floors, unsent = self._once_a_second()
        if step.txn.open or floors:
            self._copier.write(step)
            step.write_records(self.state_topic, self.state)
            if floors:
                offsets = [TopicPartition(self.state_topic, p, o) for p, o in floors.items()]
                step.txn.send_offsets(offsets, self._floor.consumer.consumer_group_metadata())
            step.txn.commit()
            self._floors_sent.update(floors)
            for key, offset in step.settled:  # their copies, if any, are written
                self._held.drop(key, offset)
            self._held_bytes.set(self._held.bytes)
        return unsent

    def _send_offsets(self, unsent: set[str]) -> None:
        """Commit the moved watermarks of the groups due and of `unsent`, from the state the
        step just made durable; a deleted topic found on the way is dropped."""
        batch = self._offsets.take(self._fetchers, also=unsent)
        committed, deleted = self._offset_sender.send(batch)
        self._offsets.sent(committed)
        if not committed:
            self._offsets.not_sent(batch)
        for group, topics in deleted.items():
            self._drop_topics(group, topics)

    def _forget_deleted_topics(self) -> None:
        """Once a second, before anything is revived: a fetched topic deleted meanwhile takes its
        lanes along. One metadata request per fetched topic (however many groups pop it) and
        second."""
        if time.monotonic() - self._topics_checked_at < FLOOR_EVERY_S:
            return
        self._topics_checked_at = time.monotonic()
        fetched = {topic for fetcher in self._fetchers.values() for topic in fetcher.topics}
        deleted = {topic for topic in fetched if not self._topic_cache.exists(topic)}
        if not deleted:
            return
        for group, fetcher in self._fetchers.items():
            self._drop_topics(group, fetcher.topics & deleted)

    def _drop_topics(self, group: str, gone: set[str]) -> None:
        """Deleted topics of `group`: their lanes go (leases, buffered records, offsets to
        commit). Nothing of them can be fetched, settled or committed again, and their offsets
        would fail the transaction that sent them."""
        fetcher = self._fetchers.get(group)
        if fetcher is None or not (gone := gone & fetcher.topics):
            return
        fetcher.remove_topics(gone)
        self.state.drop(
            {k for k in self.state.ledgers if k[0] == group and source_topic(k[1]) in gone}
        )
        self._offsets.forget(group, gone)
        log.warning("dropped the lanes of a deleted topic", group=group, topics=sorted(gone))

    def _once_a_second(self) -> tuple[dict[int, int], set[str]]:
        """The replay floors that moved and the groups with a watermark never committed here, once
        a second (each look costs a scan of the ledgers): both go in this step's transaction."""
        if time.monotonic() - self._checked_at < FLOOR_EVERY_S:
            return {}, set()
        self._checked_at = time.monotonic()
        floors = self.state.floors(
            self._partitions, lambda key: self._offsets.committed(self._fetchers, key)
        )
        moved = {p: o for p, o in floors.items() if self._floors_sent.get(p) != o}
        return moved, self._offsets.unsent(self._fetchers)

    def close(self) -> None:
        for _, future in self._drain(block=False):
            if not future.done():
                future.set_exception(RuntimeError("this sidecar stopped leading"))
        self._resumer.close(GroupFetcher.close)
        for fetcher in self._fetchers.values():
            fetcher.close()
        self._reader.close()
        self._floor.close()
        self._producers.release()
        self._held_bytes.set(0)

    def _drain(self, block: bool = True) -> list[tuple[Request, Future[Any]]]:
        items = []
        try:
            wait = self._wait_s() if block else 0
            items.append(self._queue.get(timeout=wait) if wait else self._queue.get_nowait())
            while True:
                items.append(self._queue.get_nowait())
        except queue.Empty:
            pass
        return [item for item in items if item is not WAKE]

    def _wait_s(self) -> float:
        if time.monotonic() < self._look_often_until:
            return ARRIVAL_WAIT_S
        return IDLE_WAIT_S if self._deps.awaited() else self._quiet_wait_s()

    def _quiet_wait_s(self) -> float:
        """Until the next lease ends (it is revived then: available again at once), at most
        QUIET_WAIT_S; never 0, which would not wait at all."""
        if self._next_expiry_ms is None:
            return QUIET_WAIT_S
        return min(max((self._next_expiry_ms - now_ms()) / 1000, 0.001), QUIET_WAIT_S)

    def _fetch(self) -> None:
        for group, fetcher in self._fetchers.items():
            self._fetch_group(group, fetcher)

    def _fetch_group(self, group: str, fetcher: GroupFetcher) -> None:
        for topic in fetcher.fetch():
            # The fetcher has what the watch saw come, most likely: looking every 0.5 ms for the
            # rest of the moment would cost a step each, for every arrival of a trickle.
            self._look_often_until = 0.0
            self._deps.on_available(group, topic)

    # -- pop -------------------------------------------------------------------------------

    def _fetcher(self, group: str, topic: str) -> GroupFetcher:
        fetcher = self._fetchers.get(group)
        if fetcher is None:
            # An inherited group still being made: its fetcher (each of its calls is bounded).
            fetcher = self._resumer.wait_for(group, 3 * self._timeout_s) or self._new_fetcher(group)
            self._fetchers[group] = fetcher
        if topic not in fetcher.topics:
            fetcher.add_topic(topic, self._timeout_s)
        return fetcher

    def _new_fetcher(self, group: str) -> GroupFetcher:
        group_settings = self._settings.group(group)
        assert group_settings.retry_topic and group_settings.dlq_topic
        limit = self._settings.max_record_bytes
        ensure_topics(
            self._deps.admin,
            [
                with_message_limit(TopicSpec(group_settings.retry_topic), limit),
                with_message_limit(TopicSpec(group_settings.dlq_topic), limit),
            ],
            self._settings.topic_partitions,
            self._settings.topic_replication,
            self._timeout_s,
        )
        shards = self._deps.shards
        return GroupFetcher(
            group,
            group_settings.retry_topic,
            self._deps.client_config,
            lambda lane: self.state.last_leased.get((group, *lane), -1),
            lambda topic, partition: shards.of_lane(group, topic, partition) == self.shard,
        )

    def _pop(self, request: PopRequest, future: Future[Any], step: PopStep) -> None:
        try:  # nothing is leased yet: a failure here concerns this request only
            fetcher = self._fetcher(request.group, request.topic)
            self._fetch_group(request.group, fetcher)
        except Exception as error:
            future.set_exception(error)
            return
        step.answers.append((future, self._leaser.lease(request, fetcher, step)))
