"""How a delay step writes: state records, delivery-log events and invalid copies, one place each.

Every write goes into the step's transaction (see `delay_service.step`). Settling a record as
invalid (docs/reference.md) is one path for ingest and dispatch alike: a copy on the invalid
topic with `kpd-error`, and an `invalid` event. If the invalid topic refused a full copy
in an earlier attempt of the step, the copy is truncated to its headers (never nothing).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from confluent_kafka import KafkaError, Message

from delay_service.schedules import Schedule, ScheduleIndex
from delay_service.step import Step
from delay_service.window_payloads import WindowPayloads
from foundation.clock import now_ms
from foundation.config import Settings
from foundation.delivery_log import Event, log_record
from foundation.record_size import Header, copy_limit, fitted
from foundation.wire import ERROR

TRUNCATED_COPY_BYTES = 4096  # headers kept on a copy the invalid topic refused in full
POSITION_EVERY = 64  # a step's state records whose offset it notes: the first, then one in 64

Record = tuple[bytes | None, bytes | None, list[Header]]  # key, value, headers


class StepWrites:
    def __init__(
        self,
        settings: Settings,
        index: ScheduleIndex,
        shard: int,
        window: WindowPayloads,
        refused: dict[Hashable, str],
    ) -> None:
        self.index, self.shard, self.window = index, shard, window
        self.schedules_topic = settings.state_topic("schedules")
        self._log_topic = settings.delivery_log_topic
        self._invalid_topic = settings.invalid_topic
        self._node = settings.node_id
        self._copy_limit = copy_limit(settings.max_record_bytes)
        self.refused = refused  # verdicts of an aborted attempt, by record tag
        # With one partition per shard (every deployment made with shards) a step's records
        # after its last noted one are fewer than POSITION_EVERY, and a reading that starts
        # where this index stands reads those again carefully (`delay_service.schedule_follower`).
        # A shard of several partitions (a deployment made before shards) spreads its records
        # over them as their ids hash, with no such bound per partition: every offset is noted.
        one_partition = index.shards.state_partitions == index.shards.shards
        self._note_every = POSITION_EVERY if one_partition else 1

    def lookup(self, step: Step, schedule_id: str) -> Schedule | None:
        """The id's state as this step leaves it so far: held in memory if it is due in the
        window, else read from the index (once per step)."""
        if schedule_id in step.records:
            return step.records[schedule_id]
        if schedule_id not in step.found:
            # Only this shard's leader writes its ids, so the index cannot change under the step.
            found = self.window.get(schedule_id)
            if found is None:
                found = self.index.get(self.shard, schedule_id)
                step.index_reads += 1
            step.found[schedule_id] = found
        return step.found[schedule_id]

    def prefetch(self, step: Step, schedule_ids: list[str]) -> None:
        """Read the states `lookup` will ask for, those neither in the step nor in the window,
        in one multi-get."""
        unread = []
        for schedule_id in schedule_ids:
            if schedule_id in step.records or schedule_id in step.found:
                continue
            held = self.window.get(schedule_id)
            if held is None:
                unread.append(schedule_id)
            else:
                step.found[schedule_id] = held
        if unread:
            unread = list(dict.fromkeys(unread))  # an id named twice in the chunk is read once
            step.found.update(zip(unread, self.index.get_many(self.shard, unread), strict=True))
            step.index_reads += len(unread)

    def state(self, step: Step, record: Schedule, partition: int | None = None) -> None:
        """Write `record` to the schedules topic, to `partition` if the caller has it (see
        `ShardMap.produce_partition`; -1: the producer's partitioner)."""

        # Where the index has read the schedules topic up to is noted from some of the records
        # only: a restart re-reads at most the rest, and most records cost no delivery report.
        noted = _noting(step) if len(step.ordered) % self._note_every == 0 else None
        encoded = record.encode()
        if partition is None:
            partition = self.index.shards.produce_partition(record.schedule_id)
        step.txn.add(self.schedules_topic, record.schedule_id, encoded, partition, noted)
        step.put(record, encoded)

    def log(self, step: Step, event: Event, record_id: str, target: str, **fields: Any) -> None:
        value = log_record(event, record_id, target, node=self._node, **fields)
        step.txn.add(self._log_topic, record_id, value)

    def invalid(self, step: Step, tag: Hashable, record: Record, reason: str, **event: Any) -> None:
        """Settle one record as invalid: the copy with `kpd-error`, and its `invalid` event."""
        key, value, headers = record
        limit = self._copy_limit
        refused_before = tag in self.refused
        if refused_before:  # the invalid topic refused the full copy: keep what surely fits
            step.settled.add(tag)
            limit = min(limit, len(reason) + TRUNCATED_COPY_BYTES)
        key, value, headers = fitted(key, value, headers, [(ERROR, reason.encode())], limit)
        # A truncated copy refused too means the invalid topic itself is broken: that is an
        # infrastructure fault (no tag), for the supervisor.
        tag_now = None if refused_before else tag
        step.txn.produce(self._invalid_topic, key, value, tag=tag_now, headers=headers)
        self.log(step, Event.INVALID, at_ms=now_ms(), reason=reason, **event)
        step.invalid += 1


def _noting(step: Step) -> Callable[[KafkaError | None, Message], None]:
    """The delivery report of a state record whose offset `step` notes."""

    def written(error: KafkaError | None, message: Message) -> None:
        if error is None:
            step.wrote_state(message.partition(), message.offset())

    return written
