"""The pop service of one shard while this sidecar leads it: leases, acks, revive, retry, DLQ.

One supervised thread owns the shard's pop state. HTTP handlers hand it requests through its
inbox (`revive.inbox`) and wait on futures; the thread serves every request that arrived
meanwhile in one Kafka transaction (group commit), together with the revive of expired leases and
the commit of the replay floor, and answers only after the commit; each group's offsets follow in
a transaction of their own (`revive.offsets`). So a pop is answered only once its checkpoint
record is durable, an ack only once its ack record is, and a retry copy exists exactly when the
delivery it replaces is marked settled. A pop here never waits: long polling is the router's
(`api.pop_router`), which `on_available` wakes when lanes of a (group, topic) receive records.
Between steps the thread sleeps until a request or a wake comes (`revive.inbox`), or until its
next deadline: a lease ending, a group's offsets due, the replay floors to look at after a
change. An idle shard does no work at all.

The parts, one job each: `group_fetchers` (the groups' lanes read), `lease` (pop), `settle` (ack,
nack, leases, reject, expiry), `copier` (retry and dead-letter copies), `offsets` (committed
offsets), `replay` + `pop_state` (the ledgers a new leader rebuilds from the replay floor, so
leases granted before a restart are honoured and acked messages never return).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import structlog
from confluent_kafka import TopicPartition

from foundation.config import Settings
from foundation.kafka_clients import transactional_producer
from foundation.producers_in_turn import ProducersInTurn
from foundation.shards import ShardMap
from foundation.supervision import LoopHealth
from foundation.topics import TopicCache
from revive import metrics
from revive.copier import Copier
from revive.fetcher import GroupFetcher, source_topic
from revive.group_fetchers import GroupFetchers
from revive.held_records import HeldRecords
from revive.inbox import Arrivals, Request, RequestInbox
from revive.lease import Leaser
from revive.offsets import OffsetCommitter, OffsetSender
from revive.pop_follower import Handover
from revive.pop_state import PopState
from revive.pop_step import PopStep, Unwritten
from revive.reader import OffsetReader
from revive.receipt import ReceiptCodec
from revive.replay import PopStateReader
from revive.requests import Look, PopRequest
from revive.settle import Settler
from revive.stats import group_stats
from revive.wake_times import FLOOR_EVERY_S, WakeTimes

log = structlog.get_logger(__name__)

# What the leader holds of the records it handed out, for nacks and expiries to copy without
# reading them back (`revive.held_records`): some 50k leases of 300-byte records per shard.
HELD_RECORD_BYTES = 16 * 1024 * 1024
# After the arrival watch saw a record, how long a step waits for the fetcher's copy of it (it
# comes about as soon: the broker answers both consumers' held fetches together).
ARRIVAL_WAIT_S = 0.02


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
        self.inbox = RequestInbox()
        self._producers = ProducersInTurn(
            lambda txn_id: transactional_producer(deps.producer_config, txn_id),
            settings.state_topic(f"pop-leader-{shard}"),
            fencing=health.fencing,
        )
        self._reader = OffsetReader(deps.client_config, self._timeout_s)
        self._floor = PopStateReader(
            deps.client_config, self.state_topic, settings.state_topic("pop-floor"),
            self._timeout_s,
        )  # fmt: skip
        self._partitions = deps.shards.partitions(shard)
        self._wakes = WakeTimes()
        self._topics_checked_at = 0.0  # when the fetched topics were last seen to exist
        self._topic_cache = TopicCache(deps.admin, self._timeout_s, recheck_known_s=FLOOR_EVERY_S)
        self._floors_sent: dict[int, int] = {}
        # A standby's hot state of this shard, if it had one: only its tail is left to read.
        self._handover = handover
        self.state = handover[0] if handover is not None else PopState(deps.shards)
        self._held = HeldRecords(HELD_RECORD_BYTES)
        self._unwritten = Unwritten()  # memory leases' records, for the next transaction
        self._held_bytes = metrics.HELD_BYTES.labels(str(shard))
        self._leaser = Leaser(settings, self.state, deps.codec, self._held)
        self._settler = Settler(settings, self.state)
        self._copier = Copier(settings, self.state, self._reader, self._held)
        self._offsets = OffsetCommitter(self.state)
        self.fetchers = GroupFetchers(
            settings, (deps.client_config, deps.admin), (deps.shards, shard), self.state,
            self._topic_cache, self.inbox.wake,
        )  # fmt: skip
        self._offset_sender = OffsetSender(
            self._producers, self._timeout_s, self._topic_cache.exists_now
        )

    # -- called from HTTP handlers (any thread); requests go through `inbox` ------------

    def stats(self, group: str) -> dict[str, Any]:
        """The group's numbers here, once the lanes hold what was fetched (an idle shard's
        thread sleeps: nothing moves records in meanwhile)."""
        with contextlib.suppress(Exception):  # a shard that does not answer: its lanes as they are
            self.inbox.submit(Look()).result(timeout=self._timeout_s)
        return group_stats(self.fetchers.by_group.get(group), self.state, group, self._timeout_s)

    # -- the service thread ----------------------------------------------------------------

    def start(self) -> None:
        """Fence older leaders of this shard, then rebuild its ledgers from the replay floor."""
        self._producers.init_transactions(self._timeout_s)
        at = self._handover[1] if self._handover is not None else {}
        self._floor.assign(at, [p for p in self._partitions if p not in at])
        read = self._floor.replay_to_end(self.state, self._health.beat)
        self._floor.stop_reading()
        self.fetchers.resume()
        log.info(
            "pop service started", shard=self.shard, ledgers=len(self.state.ledgers), read=read,
            hot=self._handover is not None,
        )  # fmt: skip

    def wake(self) -> None:
        """End the wait between steps (the supervisor's stop)."""
        self.inbox.wake()

    def step(self) -> None:
        """Serve what arrived (waiting for it until the next deadline), revive, commit, answer;
        then commit the group offsets that are due (`revive.offsets`)."""
        with self._health.waiting():
            requests = self.inbox.drain(self._wait_s())
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
        self._offsets.touch(step.groups)
        if step.txn.used:
            self._wakes.floors_may_move()
        if unsent or self._offsets.due():
            self._send_offsets(unsent)

    def _wait_s(self) -> float | None:
        return self._wakes.wait_s(
            self._offsets.next_due(), self.inbox.looking(), self._deps.awaited()
        )

    def _serve(self, requests: list[tuple[Request, Future[Any]]], step: PopStep) -> set[str]:
        """Serve and commit the step; the groups whose watermark was never committed here."""
        if self.fetchers.install_resumed():
            self._wakes.floors_may_move()
        self._forget_deleted_topics()
        self._fetch(*self.inbox.take_arrivals())
        for request, future in requests:
            if isinstance(request, PopRequest):
                self._pop(request, future, step)
            elif isinstance(request, Look):
                step.answers.append((future, None))
            else:
                step.answers.append((future, self._settler.settle(request, step)))
        self._wakes.expiry_ms = self._settler.expire(step)
        for fetcher in self.fetchers.by_group.values():
            self._leaser.dead_letter_untrusted(fetcher, step)
        floors, unsent = self._floors_moved()
        if step.txn.open or floors:
            self._copier.write(step)
            step.write_records(self.state_topic, self.state)
            if floors:
                offsets = [TopicPartition(self.state_topic, p, o) for p, o in floors.items()]
                step.txn.send_offsets(offsets, self._floor.consumer.consumer_group_metadata())
            step.txn.commit()
            self._floors_sent.update(floors)
            self._held.drop(step.settled)  # their copies, if any, are written
            self._held_bytes.set(self._held.bytes)
        return unsent

    def _send_offsets(self, unsent: set[str]) -> None:
        """Commit the moved watermarks of the groups due and of `unsent`, from the state the
        step just made durable; a deleted topic found on the way is dropped."""
        batch = self._offsets.take(self.fetchers.by_group, also=unsent)
        committed, deleted = self._offset_sender.send(batch)
        self._wakes.floors_may_move()
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
        for group, gone in self.fetchers.deleted_topics().items():
            self._drop_topics(group, gone)

    def _drop_topics(self, group: str, gone: set[str]) -> None:
        """Deleted topics of `group`: their lanes go (leases, buffered records, offsets to
        commit). Nothing of them can be fetched, settled or committed again, and their offsets
        would fail the transaction that sent them."""
        fetcher = self.fetchers.by_group.get(group)
        if fetcher is None or not (gone := gone & fetcher.topics):
            return
        fetcher.remove_topics(gone)
        dropped = {k for k in self.state.ledgers if k[0] == group and source_topic(k[1]) in gone}
        self.state.drop(dropped)
        self._unwritten.forget(dropped)
        self._offsets.forget(group, gone)
        log.warning("dropped the lanes of a deleted topic", group=group, topics=sorted(gone))

    def _floors_moved(self) -> tuple[dict[int, int], set[str]]:
        """The replay floors that moved and the groups with a watermark never committed here, at
        most once a second and only after a change (each look costs a scan of the ledgers): both
        go in this step's transaction."""
        if not self._wakes.look_at_floors():
            return {}, set()
        floors = self.state.floors(
            self._partitions, lambda key: self._offsets.committed(self.fetchers.by_group, key)
        )
        moved = {p: o for p, o in floors.items() if self._floors_sent.get(p) != o}
        return moved, self._offsets.unsent(self.fetchers.by_group)

    def close(self) -> None:
        for _, future in self.inbox.drain(0):
            if not future.done():
                future.set_exception(RuntimeError("this sidecar stopped leading"))
        self.fetchers.close()
        self._reader.close()
        self._floor.close()
        self._producers.release()
        self._held_bytes.set(0)

    def _fetch(self, arrivals: Arrivals, fresh: bool) -> None:
        """Move what the fetchers have into lanes; for the records the arrival watch saw, wait
        (briefly, if it saw some just now) until the fetcher has them too, and look again soon
        for those still to come."""
        until: dict[str, dict[tuple[str, int], int]] = {}
        for (group, topic, partition), offset in arrivals.items():
            until.setdefault(group, {})[(topic, partition)] = offset
        wait_s = ARRIVAL_WAIT_S if fresh else 0.0
        for group, fetcher in self.fetchers.by_group.items():
            self._fetch_group(group, fetcher, until.get(group), wait_s)
        by_group = self.fetchers.by_group
        self.inbox.still_behind(
            {
                (group, topic, partition)
                for (group, topic, partition), offset in arrivals.items()
                if group in by_group and by_group[group].next_offset(topic, partition) <= offset
            }
        )

    def _fetch_group(
        self,
        group: str,
        fetcher: GroupFetcher,
        until: dict[tuple[str, int], int] | None = None,
        wait_s: float = 0.0,
    ) -> None:
        arrived = fetcher.fetch(until, wait_s)
        if arrived:  # a watermark may exist now where none did: a group's first offsets
            self._wakes.floors_may_move()
        for topic in arrived:
            self._deps.on_available(group, topic)

    # -- pop -------------------------------------------------------------------------------

    def _pop(self, request: PopRequest, future: Future[Any], step: PopStep) -> None:
        try:  # nothing is leased yet: a failure here concerns this request only
            if not self.fetchers.knows(request.group, request.topic):  # offsets may be unsent
                self._wakes.floors_may_move()
            fetcher = self.fetchers.for_pop(request.group, request.topic)
            self._fetch_group(request.group, fetcher)
        except Exception as error:
            future.set_exception(error)
            return
        step.answers.append((future, self._leaser.lease(request, fetcher, step)))
