"""Timers out: a due schedule is published to its target, or settled as invalid if it cannot be.

A target that no longer exists, or whose write the broker refused in an earlier attempt of this
step (too large for the topic, not allowed), settles the schedule on the invalid topic with the
reason; every other due schedule flows.
"""

from __future__ import annotations

from delay_service.headers import DELIVER_AT, ID, TARGET
from delay_service.schedules import Schedule, State
from delay_service.step import Step
from delay_service.writes import StepWrites
from foundation.clock import now_ms
from foundation.delivery_log import Event
from foundation.refusals import RecordsRefused
from foundation.topics import TopicCache


class Dispatch:
    def __init__(self, writes: StepWrites, topics: TopicCache) -> None:
        self._writes, self._topics = writes, topics

    def due(self, schedule_id: str, step: Step) -> None:
        schedule = self._writes.lookup(step, schedule_id)
        if schedule is None or schedule.state is not State.SCHEDULED:
            return
        if not step.txn.open:
            step.txn.begin()
        tag = ("target", schedule_id)
        reason = self._writes.refused.get(tag)
        target = schedule.target
        if reason is None:
            exists = step.targets.get(target)  # asked once a step, not once a delivery
            if exists is None:
                exists = step.targets[target] = self._topics.exists(target)
            if not exists:
                reason = f"{TARGET} {target!r} no longer exists"
        at = now_ms()
        if reason is None:
            headers = [
                *schedule.headers,
                (ID, schedule_id.encode()),
                (DELIVER_AT, str(schedule.due_ms).encode()),
            ]
            try:
                step.txn.produce(
                    schedule.target, schedule.key, schedule.value, tag=tag,
                    headers=headers, timestamp=at,
                )  # fmt: skip
            except RecordsRefused as refusal:  # refused by the client before it was sent
                reason = refusal.refused[tag].reason
        if reason is not None:
            step.settled.add(tag)
            self._undeliver(schedule, reason, step)
            return
        self._writes.state(step, schedule.settled(State.DELIVERED, at))
        self._writes.log(
            step,
            Event.DELIVERED,
            schedule_id,
            schedule.target,
            due_ms=schedule.due_ms,
            at_ms=at,
            enqueued_ms=schedule.enqueued_ms,
            delivery_count=1,
        )
        step.delivered(schedule.due_ms)

    def _undeliver(self, schedule: Schedule, reason: str, step: Step) -> None:
        """A due schedule whose target cannot be written: to the invalid topic, like at ingest."""
        control = [
            (TARGET, schedule.target.encode()),
            (DELIVER_AT, str(schedule.due_ms).encode()),
            (ID, schedule.schedule_id.encode()),
        ]
        self._writes.invalid(
            step,
            ("invalid", schedule.schedule_id),
            (schedule.key, schedule.value, [*schedule.headers, *control]),
            reason,
            record_id=schedule.schedule_id,
            target=schedule.target,
            due_ms=schedule.due_ms,
            enqueued_ms=schedule.enqueued_ms,
        )
        self._writes.state(step, schedule.settled(State.CANCELLED, now_ms(), reason))
