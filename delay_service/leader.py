"""The delay service while this sidecar leads it: buffer topic -> schedules -> wheel -> targets.

A supervised thread runs `step()` in a loop. Each step is at most one Kafka transaction holding
  * the buffer records consumed since the last step, turned into `scheduled` / `cancelled`
    records on the schedules topic, or copied to the invalid topic with `kpd-error`;
  * the schedules that came due, published to their targets with `delivered` records;
  * their delivery-log events, and the buffer offsets consumed.
So "publish + mark delivered + commit input offsets" is one atomic step (docs/principles.md, 2), and
a crash at any point leaves either all of a step or none of it for read_committed readers.
What comes due is sent first, and again after each chunk of ingest. The leaders of a worker's
shards ingest one at a time (`delay_service.ingest_turns`): a shard waiting for its turn holds
what it has read, and dispatches and commits meanwhile.

One record fails only itself (principle 6): a record the broker refuses (a target too small for
it, one that may not be written or was deleted) aborts the step, which is redone at once without
it, and the record is settled on the invalid topic. RocksDB is written only after the commit, so
a redo (or a restart by the supervisor, for infrastructure faults) never finds memory ahead of
the truth. Only schedules due within a window sit in the timing wheel (`delay_service.due_window`);
the rest stay on disk, so memory does not grow with far-future backlog.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import structlog
from confluent_kafka import Message

from delay_service import metrics
from delay_service.buffer_reader import BufferReader, First
from delay_service.dispatch import Dispatch
from delay_service.due_window import DueWindow
from delay_service.headers import Limits
from delay_service.ingest import Ingest, Route
from delay_service.ingest_turns import IngestTurns
from delay_service.schedule_follower import schedule_reading
from delay_service.schedules import ScheduleIndex
from delay_service.shard_store import give_back_store, take_store
from delay_service.step import Step
from delay_service.writes import StepWrites
from foundation.clock import now_ms
from foundation.config import Settings
from foundation.kafka_clients import LazyAdmin, transactional_producer
from foundation.producers_in_turn import ProducersInTurn
from foundation.refusals import RecordsRefused, RefusalUnknown
from foundation.supervision import LoopHealth, StopRequested
from foundation.topics import TopicCache, message_limit_of
from foundation.transactions import Transaction

log = structlog.get_logger(__name__)

BATCH = 2000  # deliveries per transaction: big enough to amortise the commit
INGEST_BATCH = 1000  # buffer records per step: bounds how long due deliveries wait behind ingest
TRACKED_AFTER_FAILURE_S = 5.0
FENCE_PROBE_S = 0.5  # while handing over
START_FETCH_WAIT_MS = 10
CATCH_UP_S = 120.0  # reading a shard's schedules before and after the fence, each
# The longest a step waits for records when nothing comes due sooner: records, and the turn to
# ingest them, end a wait at once, so this bounds only a stop (a consume cannot be woken) ...
MAX_WAIT_S = 1.0
# ... and, handing over, the fence probe's period (`FENCE_PROBE_S`).


@dataclass(frozen=True)
class DelayDeps:
    """What every shard's delay leader of one process shares."""

    settings: Settings
    index: ScheduleIndex  # and through it each shard's store
    client_config: dict[str, Any]
    producer_config: dict[str, Any]
    kpd_topics: frozenset[str]  # delivering into kpd's own topics would corrupt them
    clock_margin_ms: Callable[[], int]  # how far this clock may run ahead of the broker's
    ingest_turns: IngestTurns


class DelayLeader:
    def __init__(
        self, deps: DelayDeps, shard: int, health: LoopHealth, refused: dict[Hashable, str]
    ) -> None:
        settings = deps.settings
        self.shard = shard
        self._deps, self._index = deps, deps.index
        self._holds_store = False  # the shard's store, taken at the start (`shard_store`)
        self._fenced = False  # its producers' transactions initialised
        self._admin = LazyAdmin(deps.client_config)  # targets' existence, a refusing topic's limit
        self._health = health
        self._buffer, self._inbox = settings.buffer_topic, settings.state_topic("delay-inbox")
        self._election = settings.state_topic("leader")  # one partition per shard
        limits = Limits(
            max_delay_ms=settings.max_delay_ms,
            max_record_bytes=settings.max_record_bytes,
            forbidden_targets=deps.kpd_topics,
        )
        self._timeout_s = settings.kafka_timeout_ms / 1000
        self._ingest_behind_delivery_s = settings.ingest_behind_delivery_ms / 1000
        self._producer_config = deps.producer_config
        self._producers = ProducersInTurn(
            lambda txn_id: transactional_producer(self._producer_config, txn_id),
            settings.state_topic(f"delay-leader-{shard}"),
            fencing=health.fencing,
        )
        self._reader = BufferReader(
            deps.client_config, settings.state_topic("delay"), shard, deps.ingest_turns,
            self._timeout_s,
        )  # fmt: skip
        # Known targets are checked again each second: one deleted meanwhile is caught before
        # its write could fail the transaction.
        topics = TopicCache(self._admin, self._timeout_s, recheck_known_s=1.0)
        self._due = DueWindow(self._index, shard)
        self._wheel = self._due.wheel
        # Verdicts of aborted steps, by record tag: the redo settles those records instead. The
        # dict outlives this object, so even a restart of the role never retries such a record.
        self._refused = refused
        # Steps run untracked (no delivery report per record) until one fails: then steps are
        # tracked for a while, so the redo that meets the refused record again names it.
        self._tracked_until = 0.0
        self._handing_over, self._probed_at = False, 0.0  # see hand_over
        self._writes = StepWrites(settings, self._index, shard, self._due.payloads, self._refused)
        timers = (self._due.add, self._wheel.remove)
        route = Route(shard, self._index.shards, self._inbox)
        self._ingest = Ingest(self._writes, limits, topics, health, timers, route)
        self._dispatch = Dispatch(self._writes, topics)

    def start(self) -> None:
        """Take the shard's store, read the shard's schedules while its previous leader may
        still deliver them (it goes on until fenced, `cluster.conductor`), fence it, read the
        rest it left, then take over the shard's buffer and inbox partitions. A member whose
        index did not follow the shard thus reads most of it before the shard stops
        delivering, not after. A store another worker of this sidecar holds is waited for, and
        freed by the fence if it must be, which then comes first (`delay_service.shard_store`).
        Given away before the fence (`hand_over` while starting), the start ends there; after
        it, the start goes on, and the leader delivers until the next owner fences it in turn."""
        fenced = take_store(self._index.stores, self.shard, self._fence, self._beat_unless_released)
        self._holds_store = True
        shards = self._index.shards
        follower = schedule_reading(
            self._deps.client_config,
            self._index,
            self._writes.schedules_topic,
            only=lambda _, partition: shards.of_partition(partition) == self.shard,
            # At the end of a partition a fetch waits for new records (500 ms by default): the
            # reading before and after the fence reaches the end once each, on the failover path.
            consumer_overrides={"fetch.wait.max.ms": START_FETCH_WAIT_MS},
        )
        try:
            follower.assign()
            if not fenced:
                follower.approach(timeout_s=CATCH_UP_S, beat=self._beat_unless_released)
                # Given away meanwhile, `LoopHealth.fencing` ends the start here, fencing nobody.
                self._fence()
            follower.catch_up(timeout_s=CATCH_UP_S, beat=self._health.beat_unless_stopping)
        finally:
            metrics.START_READS.labels(str(self.shard)).inc(follower.applied)
            follower.close()
        self._reader.assign((self._buffer, self._inbox), shards)
        self._due.refill(now_ms())
        pending = self._index.count_pending(self.shard)
        metrics.PENDING.labels(str(self.shard)).set(pending)
        metrics.DUE_BACKLOG.labels(str(self.shard)).set(self._wheel.due_backlog())
        log.info(
            "delay leader started", shard=self.shard, pending=pending, in_wheel=len(self._wheel)
        )

    def _fence(self) -> None:
        """Fence the shard's other writers; called again (`take_store`), with new epochs."""
        if self._fenced:
            self._producers.renew(self._timeout_s)
        else:
            self._producers.init_transactions(self._timeout_s)
            self._fenced = True

    def _beat_unless_released(self) -> None:
        """A beat for the reading before the fence: the shard given away meanwhile (`hand_over`
        came), the start ends there, as a stopped one would, without fencing anyone."""
        self._health.beat_unless_stopping()
        if self._handing_over:
            raise StopRequested(self._health.name)

    def close(self) -> None:
        self._reader.close()
        self._producers.release()
        if self._holds_store:
            self._holds_store = False
            give_back_store(self._index.stores, self.shard)
        # Another node reports them now.
        for gauge in (metrics.PENDING, metrics.DUE_BACKLOG, metrics.WINDOW_HELD):
            gauge.labels(str(self.shard)).set(0)

    def step(self) -> None:
        chunk, first = self._reader.next_chunk(self._wait_s())
        self._due.refill(now_ms())
        tracked = time.monotonic() < self._tracked_until
        step = Step(self._producers, self._timeout_s, tracked=tracked)
        try:
            self._dispatch_due(step)  # what is due goes first: ingest must not make it late
            if chunk:
                try:
                    self._ingest_all(chunk, first, step)
                finally:
                    self._reader.turn_done()
            self._dispatch_due(step)  # past-due schedules that just arrived
            if first:
                step.txn.send_offsets(*self._reader.offsets())
            step.txn.commit()
        except RecordsRefused as refusal:
            self._redo_without(refusal, first, step)
            return
        except RefusalUnknown as failure:
            log.info("step failed untracked; redoing it tracked", error=str(failure))
            # For long enough that the redo has consumed the step's records again: a step that
            # ran before they came back (it had nothing of them) must not end the tracking.
            self._tracked_until = time.monotonic() + TRACKED_AFTER_FAILURE_S
            self._rewind(first, step)
            return
        if step.txn_used:
            self._applied(step)
        elif self._handing_over and time.monotonic() - self._probed_at >= FENCE_PROBE_S:
            self._probe_fence()

    def hand_over(self) -> None:
        """The shard is another member's now: deliver on until it fences this leader, and
        learn of the fence soon even while idle (a step that writes nothing never meets it)."""
        self._handing_over = True

    def _probe_fence(self) -> None:
        """A transaction of one record on the shard's partition of the election topic, which
        nothing reads: the broker refuses it once the new owner has fenced this producer. (The
        buffer offsets will not do: an idle reader has none to send, and librdkafka then sends
        nothing.)"""
        self._probed_at = time.monotonic()
        txn = Transaction(self._producers, self._timeout_s)
        node = self._deps.settings.node_id
        txn.produce(self._election, node, b"fence probe", partition=self.shard)
        txn.commit()

    def _ingest_all(self, chunk: list[Message], first: First, step: Step) -> None:
        """Ingest up to INGEST_BATCH records, read INGEST_CHUNK at a time, each chunk dropped
        once it is handled; less once the step carries a delivery: the rest of the buffer waits for
        the next step once that delivery has waited `ingest_behind_delivery_ms` (20 ms halved the
        read_committed lateness under 5k due/s + 15k/s of ingest, without slowing that ingest)."""
        ingested = 0
        while chunk:
            ingested += len(chunk)
            self._ingest.records(chunk, step)
            self._dispatch_due(step)  # sent now, at the broker before the step's commit
            if ingested >= INGEST_BATCH:
                return
            if step.delivering_for_s() > self._ingest_behind_delivery_s:
                metrics.INGEST_YIELDS.inc()
                return
            chunk = self._reader.more(first)

    def _dispatch_due(self, step: Step) -> None:
        # Due by the broker's clock too: a clock running ahead waits the difference out.
        now = now_ms() - self._deps.clock_margin_ms()
        for due_ms, schedule_id in self._wheel.advance(now, limit=BATCH):
            step.taken.append((due_ms, schedule_id))
            self._dispatch.due(schedule_id, step)
        # With the targets just produced: the partitions of the step's records join its
        # transaction in one request, not one more after these records' turn at the commit.
        step.txn.send_added()

    def _applied(self, step: Step) -> None:
        """The step is committed: index it, forget the verdicts it settled, count it."""
        store = self._index.store(self.shard)
        store.write(step.index_batch(store, self._index, self.shard, self._writes.schedules_topic))
        self._due.applied(step.applied)
        for tag in step.settled:
            self._refused.pop(tag, None)
        step.count()
        metrics.PENDING.labels(str(self.shard)).set(self._index.count_pending(self.shard))
        metrics.DUE_BACKLOG.labels(str(self.shard)).set(self._wheel.due_backlog())
        metrics.WINDOW_HELD.labels(str(self.shard)).set(self._due.payloads.bytes)

    def _redo_without(self, refusal: RecordsRefused, first: First, step: Step) -> None:
        """The broker refused some records: rewind the step; the next one settles them."""
        blamed, smaller = refusal.judge(
            lambda topic: message_limit_of(self._admin.client(), topic, self._timeout_s),
            self._producer_config["batch.size"],
        )
        log.warning(
            "records refused; redoing the step without them", blamed=blamed, batch_bytes=smaller
        )
        self._refused.update(blamed)
        if smaller is not None:  # a target takes less than a batch: send smaller ones
            self._producer_config = {**self._producer_config, "batch.size": smaller}
        self._rewind(first, step)

    def _rewind(self, first: First, step: Step) -> None:
        """Undo an aborted step: its records are consumed and its due schedules taken again."""
        if self._handing_over:  # a new producer would fence the shard's new owner
            raise RuntimeError(f"shard {self.shard} is handed over: its step is not redone here")
        # The refused batch used up sequence numbers the broker never accepted: only a new
        # producer epoch lets the next transaction write that partition again.
        self._producers.renew(self._timeout_s)
        self._reader.rewind(first)
        for due_ms, schedule_id in step.taken:
            self._wheel.add(schedule_id, due_ms)

    def _wait_s(self) -> float:
        """Sleep in the consumer until the next timer or window slide, at most MAX_WAIT_S (the
        fence probe's period while handing over)."""
        now = now_ms()
        longest = FENCE_PROBE_S if self._handing_over else MAX_WAIT_S
        wakes = [now + int(longest * 1000)]
        slide = self._due.next_slide_ms()
        if slide is not None:
            wakes.append(slide)
        expiry = self._wheel.next_expiry_ms()
        if expiry is not None:
            wakes.append(expiry + self._deps.clock_margin_ms())
        return max(min(wakes) - now, 0) / 1000
