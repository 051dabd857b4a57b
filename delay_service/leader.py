"""The delay service while this sidecar leads: buffer topic -> schedules -> wheel -> targets.

One thread runs `step()` in a loop. Each step is at most one Kafka transaction holding
  * the buffer records consumed since the last step, turned into `scheduled` / `cancelled`
    records on the schedules topic, or copied to the invalid topic with `kpd-error`;
  * the schedules that came due, published to their targets with `delivered` records;
  * their delivery-log events, and the buffer offsets consumed.
So "publish + mark delivered + commit input offsets" is one atomic step (DESIGN principle 2), and
a crash at any point leaves either all of a step or none of it for read_committed readers.

RocksDB is written only after the commit, from the same records; if anything fails the leader
is rebuilt from Kafka (the caller restarts it), so memory never runs ahead of the truth.
Only schedules due within `WINDOW_MS` sit in the timing wheel; the rest stay on disk and are
range-scanned in as the window slides, so memory does not grow with far-future backlog.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import structlog
from confluent_kafka import OFFSET_BEGINNING, KafkaError, Message, TopicPartition

from delay_service import metrics
from delay_service.headers import (
    DELIVER_AT,
    ID,
    TARGET,
    CancelRequest,
    InvalidRecord,
    Limits,
    ScheduleRequest,
    parse,
)
from delay_service.schedules import Schedule, ScheduleIndex, State
from delay_service.timing_wheel import TimingWheelTimer
from sidecar.clock import now_ms
from sidecar.config import Settings
from sidecar.delivery_log import Event, log_record
from sidecar.kafka_clients import state_consumer, transactional_producer
from sidecar.state_follower import StateFollower, stage_position
from sidecar.store import Store
from sidecar.topics import TopicCache

log = structlog.get_logger(__name__)

BATCH = 2000  # deliveries per transaction: big enough to amortise the commit
INGEST_BATCH = 1000  # buffer records per step: bounds how long due deliveries wait behind ingest
WINDOW_MS = 10_000  # how far ahead the wheel holds schedules
# The window slides in small steps: loading half a window at once (tens of thousands of entries
# at a high due rate) stalled dispatch for that long and showed in the p99 lateness.
SLIDE_MS = 250
MAX_WAIT_S = 0.05  # longest poll when nothing is due (also bounds shutdown and demotion time)


@dataclass
class DelayTopics:
    buffer: str
    invalid: str
    delivery_log: str
    schedules: str

    @classmethod
    def from_settings(cls, settings: Settings) -> DelayTopics:
        return cls(
            settings.buffer_topic,
            settings.invalid_topic,
            settings.delivery_log_topic,
            settings.state_topic("schedules"),
        )


@dataclass
class _Step:
    """What one transaction changes, applied to RocksDB and metrics after the commit."""

    records: dict[str, Schedule] = field(default_factory=dict)  # latest state per id
    ordered: list[Schedule] = field(default_factory=list)
    lateness_ms: list[int] = field(default_factory=list)
    scheduled: int = 0
    cancelled: int = 0
    invalid: int = 0
    open: bool = False  # has the transaction begun?
    undelivered: list[str] = field(default_factory=list)  # ids settled as undeliverable
    failed: dict[str, str] = field(default_factory=dict)  # id -> why its target write failed
    state_ends: dict[int, int] = field(default_factory=dict)  # schedules partition -> last offset

    def put(self, record: Schedule) -> None:
        self.records[record.schedule_id] = record
        self.ordered.append(record)


class DelayLeader:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        client_config: dict[str, Any],
        undeliverable: dict[str, str],
    ) -> None:
        # Schedules whose target write failed in an earlier (aborted) step, with the reason. It
        # outlives this object: the leader that is rebuilt after the failure settles them as
        # invalid instead of retrying them, and every later delivery flows again.
        self._undeliverable = undeliverable
        self._settings = settings
        self._node = settings.node_id
        self._store = store
        self._index = ScheduleIndex(store)
        self.topics = DelayTopics.from_settings(settings)
        self._limits = Limits(
            max_delay_ms=settings.max_delay_ms,
            max_record_bytes=settings.max_record_bytes,
            forbidden_targets=frozenset(
                {
                    self.topics.buffer,
                    self.topics.invalid,
                    self.topics.delivery_log,
                    self.topics.schedules,
                    # other state topics: a record delivered there would corrupt their state
                    settings.state_topic("leader"),
                    settings.state_topic("pop-state"),
                }
            ),
        )
        timeout_s = settings.kafka_timeout_ms / 1000
        self._timeout_s = timeout_s
        self._producer = transactional_producer(client_config, settings.state_topic("delay-leader"))
        self._consumer = state_consumer(
            client_config, settings.state_topic("delay"), **{"fetch.wait.max.ms": 10}
        )
        # Known targets are checked again each second: one deleted meanwhile is caught before
        # its write could fail the transaction.
        self._topics = TopicCache(self._producer, timeout_s, recheck_known_s=1.0)
        self._assignment: list[TopicPartition] = []
        self._wheel = TimingWheelTimer(now_ms())
        self._loaded_until = 0

    def start(self, follower: StateFollower) -> None:
        """Fence older leaders, read the state they left, then take over the buffer topic."""
        self._producer.init_transactions(self._timeout_s)
        follower.catch_up(timeout_s=120)
        metadata = self._consumer.list_topics(self.topics.buffer, timeout=self._timeout_s)
        partitions = [
            TopicPartition(self.topics.buffer, p)
            for p in sorted(metadata.topics[self.topics.buffer].partitions)
        ]
        committed = self._consumer.committed(partitions, timeout=self._timeout_s)
        self._assignment = [
            TopicPartition(
                tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            )
            for tp in committed
        ]
        self._consumer.assign(self._assignment)
        self._refill(now_ms())
        pending = self._index.count_pending()
        metrics.PENDING.set(pending)
        log.info("delay leader started", pending=pending, in_wheel=len(self._wheel))

    def close(self) -> None:
        self._consumer.close()
        self._producer.flush(1)

    def step(self) -> None:
        messages = self._consumer.consume(num_messages=INGEST_BATCH, timeout=self._wait_s())
        self._refill(now_ms())
        step = _Step()
        self._dispatch_due(step)  # what is due goes first: ingest must not make it late
        records = [m for m in messages if m.error() is None]
        for message in records:
            self._ingest(message, step)
        self._dispatch_due(step)  # past-due schedules that just arrived
        if not step.open:
            return
        self._commit(step, offsets=bool(records))

    def _dispatch_due(self, step: _Step) -> None:
        for _, schedule_id in self._wheel.advance(now_ms(), limit=BATCH):
            self._dispatch(schedule_id, step)

    # -- the transaction -------------------------------------------------------------------

    def _commit(self, step: _Step, offsets: bool) -> None:
        self._producer.flush(self._timeout_s)  # delivery reports of this step's records
        if step.failed:
            self._undeliverable.update(step.failed)
            raise RuntimeError(f"target writes failed, settling them as invalid: {step.failed}")
        if offsets:
            self._producer.send_offsets_to_transaction(
                self._consumer.position(self._assignment),
                self._consumer.consumer_group_metadata(),
                self._timeout_s,
            )
        self._producer.commit_transaction(self._timeout_s)
        batch = self._store.batch()
        self._index.stage(batch, step.ordered)
        # The index now holds these state records: a restart need not read them again.
        for partition, last in step.state_ends.items():
            stage_position(batch, self.topics.schedules, partition, last + 1)
        self._store.write(batch)
        for schedule_id in step.undelivered:
            self._undeliverable.pop(schedule_id, None)
        for late in step.lateness_ms:
            metrics.LATENESS.observe(late / 1000)
        metrics.DELIVERED.inc(len(step.lateness_ms))
        metrics.SCHEDULED.inc(step.scheduled)
        metrics.CANCELLED.inc(step.cancelled)
        metrics.INVALID.inc(step.invalid)
        metrics.PENDING.set(self._index.count_pending())
        metrics.DUE_BACKLOG.set(self._wheel.due_backlog())

    def _open(self, step: _Step) -> None:
        """Begin the step's transaction on its first write (idle steps cost no round trip)."""
        if not step.open:
            self._producer.begin_transaction()
            step.open = True

    def _produce(self, topic: str, key: bytes | str | None, value: bytes | None, **kw: Any) -> None:
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, **kw)
                return
            except BufferError:  # local queue full: let librdkafka send some first
                self._producer.poll(0.01)

    def _log(self, event: Event, record_id: str, target: str, **fields: Any) -> None:
        value = log_record(event, record_id, target, node=self._node, **fields)
        self._produce(self.topics.delivery_log, record_id, value)

    def _state(self, step: _Step, record: Schedule) -> None:
        def written(error: KafkaError | None, message: Message) -> None:
            if error is None:
                ends = step.state_ends
                ends[message.partition()] = max(ends.get(message.partition(), -1), message.offset())

        self._produce(
            self.topics.schedules, record.schedule_id, record.encode(), on_delivery=written
        )
        step.put(record)

    def _lookup(self, step: _Step, schedule_id: str) -> Schedule | None:
        return step.records.get(schedule_id) or self._index.get(schedule_id)

    # -- buffer topic in -------------------------------------------------------------------

    def _ingest(self, message: Message, step: _Step) -> None:
        self._open(step)
        _, timestamp_ms = message.timestamp()
        # Partition, offset and timestamp: unique even if the buffer topic is recreated.
        default_id = f"b{message.partition()}-{message.offset()}-{timestamp_ms}"
        try:
            request = parse(
                message.headers(),
                message.key(),
                message.value(),
                timestamp_ms,
                default_id,
                self._limits,
            )
            if isinstance(request, ScheduleRequest) and not self._topics.exists(request.target):
                raise InvalidRecord(f"{TARGET} {request.target!r} does not exist")
        except InvalidRecord as error:
            self._reject(message, default_id, str(error), step)
            return
        if isinstance(request, CancelRequest):
            self._cancel(request.schedule_id, step)
        else:
            self._schedule(request, message, timestamp_ms, step)

    def _schedule(
        self, request: ScheduleRequest, message: Message, enqueued_ms: int, step: _Step
    ) -> None:
        if self._lookup(step, request.schedule_id) is not None:
            return  # the same id twice schedules once
        record = Schedule(
            request.schedule_id,
            State.SCHEDULED,
            request.target,
            request.due_ms,
            message.key(),
            message.value(),
            request.headers,
            enqueued_ms,
        )
        self._state(step, record)
        self._log(
            Event.SCHEDULED,
            record.schedule_id,
            record.target,
            due_ms=record.due_ms,
            at_ms=now_ms(),
            enqueued_ms=enqueued_ms,
        )
        step.scheduled += 1
        if record.due_ms < self._loaded_until:
            self._wheel.add(record.schedule_id, record.due_ms)

    def _cancel(self, schedule_id: str, step: _Step) -> None:
        current = self._lookup(step, schedule_id)
        if current is not None and current.state is not State.SCHEDULED:
            return  # delivered or cancelled already: nothing to undo
        at = now_ms()
        # A cancel that overtakes its schedule (other partition, or sent first) still wins.
        record = (
            current.settled(State.CANCELLED, at, "cancelled")
            if current is not None
            else Schedule(
                schedule_id,
                State.CANCELLED,
                "",
                0,
                at_ms=at,
                reason="cancelled before it was scheduled",
            )
        )
        self._state(step, record)
        self._log(
            Event.CANCELLED,
            schedule_id,
            record.target,
            due_ms=record.due_ms,
            at_ms=at,
            enqueued_ms=record.enqueued_ms or None,
        )
        self._wheel.remove(schedule_id)
        step.cancelled += 1

    def _reject(self, message: Message, default_id: str, reason: str, step: _Step) -> None:
        headers = list(message.headers() or [])
        self._produce(
            self.topics.invalid,
            message.key(),
            message.value(),
            headers=[*headers, ("kpd-error", reason.encode())],
        )
        target = next((v for k, v in headers if k == TARGET and v), b"")
        self._log(
            Event.INVALID,
            default_id,
            target.decode(errors="replace")[:249],
            due_ms=None,
            at_ms=now_ms(),
            enqueued_ms=message.timestamp()[1],
            reason=reason,
        )
        step.invalid += 1

    # -- timers out ------------------------------------------------------------------------

    def _dispatch(self, schedule_id: str, step: _Step) -> None:
        schedule = self._lookup(step, schedule_id)
        if schedule is None or schedule.state is not State.SCHEDULED:
            return
        self._open(step)
        reason = self._undeliverable.get(schedule_id)
        if reason is None and not self._topics.exists(schedule.target):
            reason = f"{TARGET} {schedule.target!r} no longer exists"
        if reason is not None:
            self._undeliver(schedule, reason, step)
            return
        at = now_ms()
        headers = [
            *schedule.headers,
            (ID, schedule_id.encode()),
            (DELIVER_AT, str(schedule.due_ms).encode()),
        ]

        def delivered(error: KafkaError | None, _: Message) -> None:
            if error is not None:
                step.failed[schedule_id] = f"cannot write to {schedule.target!r}: {error.str()}"

        self._produce(
            schedule.target,
            schedule.key,
            schedule.value,
            headers=headers,
            timestamp=at,
            on_delivery=delivered,
        )
        self._state(step, schedule.settled(State.DELIVERED, at))
        self._log(
            Event.DELIVERED,
            schedule_id,
            schedule.target,
            due_ms=schedule.due_ms,
            at_ms=at,
            enqueued_ms=schedule.enqueued_ms,
            delivery_count=1,
        )
        step.lateness_ms.append(at - schedule.due_ms)

    def _undeliver(self, schedule: Schedule, reason: str, step: _Step) -> None:
        """A due schedule whose target cannot be written: to the invalid topic, like at ingest."""
        at = now_ms()
        control = [
            (TARGET, schedule.target.encode()),
            (DELIVER_AT, str(schedule.due_ms).encode()),
            (ID, schedule.schedule_id.encode()),
        ]
        self._produce(
            self.topics.invalid,
            schedule.key,
            schedule.value,
            headers=[*schedule.headers, *control, ("kpd-error", reason.encode())],
        )
        self._state(step, schedule.settled(State.CANCELLED, at, reason))
        self._log(
            Event.INVALID,
            schedule.schedule_id,
            schedule.target,
            due_ms=schedule.due_ms,
            at_ms=at,
            enqueued_ms=schedule.enqueued_ms,
            reason=reason,
        )
        step.undelivered.append(schedule.schedule_id)
        step.invalid += 1

    def _refill(self, now: int) -> None:
        """Slide the in-memory window: load schedules due before now + WINDOW_MS from RocksDB."""
        if now + WINDOW_MS - SLIDE_MS < self._loaded_until:
            return
        horizon = now + WINDOW_MS
        for due_ms, schedule_id in self._index.due_between(self._loaded_until, horizon):
            self._wheel.add(schedule_id, due_ms)
        self._loaded_until = horizon

    def _wait_s(self) -> float:
        """Sleep in the consumer until the next timer or the next window slide, at most 50 ms."""
        now = now_ms()
        wake = self._loaded_until - WINDOW_MS + SLIDE_MS
        expiry = self._wheel.next_expiry_ms()
        if expiry is not None:
            wake = min(wake, expiry)
        return min(max(wake - now, 0) / 1000, MAX_WAIT_S)
