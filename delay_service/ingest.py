"""Buffer topic in: each record becomes a schedule, a cancel, or an invalid copy with a reason.

A schedule belongs to the shard of its id (`foundation.shards`), so a cancel or a second schedule
with the same id meets it wherever it was produced. A valid record read from a buffer partition
of another shard's id is re-keyed: copied as it is to that shard's partition of the inbox topic,
in the same transaction as the buffer offsets. The owning shard reads it there and alone
decides: the first schedule of an id wins, a cancel always wins. A record without an id of its
own gets one that belongs to the shard reading it, so it is never re-keyed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Message

from delay_service.headers import (
    TARGET,
    CancelRequest,
    InvalidRecord,
    Limits,
    ScheduleRequest,
    parse,
)
from delay_service.schedules import Schedule, State
from delay_service.step import Step
from delay_service.writes import StepWrites
from foundation.clock import now_ms
from foundation.delivery_log import Event
from foundation.shards import ShardMap, default_schedule_id
from foundation.supervision import LoopHealth
from foundation.topics import TopicCache

# A buffer record as read: (record, timestamp, its default id, its request or why it is invalid,
# the schedules-topic partition of its id (None for an invalid one), the shard of its id).
# A plain tuple: one is made for every buffer record.
Parsed = tuple[Message, int, str, ScheduleRequest | CancelRequest | str, int | None, int]


@dataclass(frozen=True)
class Route:
    """Where the records of ids of other shards go: the inbox partition of their shard."""

    shard: int
    shards: ShardMap
    inbox: str


class Ingest:
    def __init__(
        self,
        writes: StepWrites,
        limits: Limits,
        topics: TopicCache,
        health: LoopHealth,
        timers: tuple[Callable[[str, int], None], Callable[[str], None]],
        route: Route,
    ) -> None:
        self._writes, self._limits, self._topics, self._health = writes, limits, topics, health
        self._add_timer, self._remove_timer = timers  # the wheel's add(id, due) and remove(id)
        self._route = route

    def records(self, chunk: list[Message], step: Step) -> None:
        """Ingest buffer records in their order: each is parsed and routed first, the states
        of the ids this shard owns are read in one multi-get, then each one is applied."""
        targets = step.targets  # whether each target exists, asked once a step
        parsed = [self._parse(message, targets) for message in chunk if message.error() is None]
        here = self._route.shard
        ids = [r[3].schedule_id for r in parsed if r[5] == here and not isinstance(r[3], str)]
        self._writes.prefetch(step, ids)
        for message, timestamp_ms, default_id, request, placed, owner in parsed:
            self._health.current = message
            if isinstance(request, str):
                self._reject(message, default_id, request, step)
            elif owner != here:
                self._forward(message, owner, step)
            elif isinstance(request, CancelRequest):
                self._cancel(request.schedule_id, placed, step)
            else:
                self._schedule(request, message, timestamp_ms, placed, step)

    def _parse(self, message: Message, targets: dict[str, bool]) -> Parsed:
        self._health.current = message
        _, timestamp_ms = message.timestamp()
        default_id = default_schedule_id(message.partition(), message.offset(), timestamp_ms)
        try:
            request = parse(
                message.headers(),
                message.key(),
                message.value(),
                timestamp_ms,
                default_id,
                self._limits,
            )
            if isinstance(request, ScheduleRequest):
                target = request.target
                exists = targets.get(target)
                if exists is None:
                    exists = targets[target] = self._topics.exists(target)
                if not exists:
                    raise InvalidRecord(f"{TARGET} {target!r} does not exist")
        except InvalidRecord as error:
            return message, timestamp_ms, default_id, str(error), None, self._route.shard
        if request.schedule_id is default_id:  # its own: placed by the partition just read
            placed = self._route.shards.of_partition(message.partition())
            return message, timestamp_ms, default_id, request, placed, self._route.shard
        # A named id, which may even be written like a default id of another partition.
        partition = self._route.shards.partition_of_key(request.schedule_id)
        owner = self._route.shards.of_partition(partition)
        return message, timestamp_ms, default_id, request, partition, owner

    def _forward(self, message: Message, owner: int, step: Step) -> None:
        # Key, value, headers and timestamp stay the producer's: they reach the target as sent,
        # and a `kpd-delay-ms` counts from the same buffer timestamp. Only a record that names its
        # id (`kpd-id`, `kpd-cancel`) comes here: a default id belongs to the shard reading it.
        step.txn.produce(
            self._route.inbox, message.key(), message.value(), headers=message.headers(),
            partition=owner, timestamp=message.timestamp()[1],
        )  # fmt: skip
        step.forwarded += 1

    def _schedule(
        self,
        request: ScheduleRequest,
        message: Message,
        enqueued_ms: int,
        placed: int,
        step: Step,
    ) -> None:
        current = self._writes.lookup(step, request.schedule_id)
        if current is not None:  # the same id twice schedules once
            if current.state is State.CANCELLED and not current.target:
                # Its cancel came first: record and say so again now that the target is known,
                # so the audit books the cancel under the target it was meant for (once).
                filled = Schedule(
                    schedule_id=request.schedule_id, state=State.CANCELLED,
                    target=request.target, due_ms=request.due_ms, enqueued_ms=enqueued_ms,
                    at_ms=current.at_ms, reason=current.reason,
                )  # fmt: skip
                self._writes.state(step, filled, placed)
                self._writes.log(
                    step, Event.CANCELLED, request.schedule_id, request.target,
                    due_ms=request.due_ms, at_ms=now_ms(), enqueued_ms=enqueued_ms,
                    reason="cancelled before it was scheduled",
                )  # fmt: skip
            return
        record = Schedule(
            schedule_id=request.schedule_id,
            state=State.SCHEDULED,
            target=request.target,
            due_ms=request.due_ms,
            key=message.key(),
            value=message.value(),
            headers=request.headers,
            enqueued_ms=enqueued_ms,
        )
        self._writes.state(step, record, placed)
        self._writes.log(
            step,
            Event.SCHEDULED,
            record.schedule_id,
            record.target,
            due_ms=record.due_ms,
            at_ms=now_ms(),
            enqueued_ms=enqueued_ms,
        )
        step.scheduled += 1
        self._add_timer(record.schedule_id, record.due_ms)

    def _cancel(self, schedule_id: str, placed: int, step: Step) -> None:
        current = self._writes.lookup(step, schedule_id)
        if current is not None and current.state is not State.SCHEDULED:
            return  # delivered or cancelled already: nothing to undo
        at = now_ms()
        # A cancel that overtakes its schedule (other partition, or sent first) still wins.
        record = (
            current.settled(State.CANCELLED, at, "cancelled")
            if current is not None
            else Schedule(
                schedule_id=schedule_id, state=State.CANCELLED, target="", due_ms=0, at_ms=at,
                reason="cancelled before it was scheduled",
            )
        )  # fmt: skip
        self._writes.state(step, record, placed)
        self._writes.log(
            step,
            Event.CANCELLED,
            schedule_id,
            record.target,
            due_ms=record.due_ms,
            at_ms=at,
            enqueued_ms=record.enqueued_ms or None,
        )
        self._remove_timer(schedule_id)
        step.cancelled += 1

    def _reject(self, message: Message, default_id: str, reason: str, step: Step) -> None:
        headers = list(message.headers() or [])
        target = next((v for k, v in headers if k == TARGET and v), b"")
        self._writes.invalid(
            step,
            (message.topic(), message.partition(), message.offset()),
            (message.key(), message.value(), headers),
            reason,
            record_id=default_id,
            target=target.decode(errors="replace")[:249],
            due_ms=None,
            enqueued_ms=message.timestamp()[1],
        )
