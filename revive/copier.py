"""Write the step's copies: retries (now, or later through the delay service) and dead letters.

Leases keep only offsets, so each message is read again from Kafka (`revive.reader`). Sizes are
checked before anything is written, so the broker never refuses a copy (DESIGN principle 6): a
message too large to come back as a retry (bigger than `KPD_MAX_RECORD_BYTES` once kpd's headers
are on it) is dead-lettered with that reason instead, and a dead letter that cannot carry its
payload is written truncated (`foundation.record_size.fitted`), never not at all.
"""

from __future__ import annotations

import structlog
from confluent_kafka import Message

from foundation.clock import now_ms
from foundation.config import GroupSettings, Settings
from foundation.delivery_log import Event
from foundation.record_size import Header, copy_limit, fitted, record_bytes
from revive import metrics
from revive.copies import DLQ_REASON, Origin, copy_headers, trusted_or_flagged
from revive.fetcher import source_topic
from revive.pop_state import PopState
from revive.pop_step import Copy, PopStep
from revive.reader import OffsetReader

log = structlog.get_logger(__name__)


class Copier:
    def __init__(self, settings: Settings, state: PopState, reader: OffsetReader) -> None:
        self._settings, self._state, self._reader = settings, state, reader
        self._limit = copy_limit(settings.max_record_bytes)

    def write(self, step: PopStep) -> None:
        if not step.copies:
            return
        wanted = {(source_topic(c.key[1]), c.key[2], c.offset) for c in step.copies}
        found = self._reader.read(wanted)
        now = now_ms()
        for copy in step.copies:
            group_name, lane, partition = copy.key
            message = found.get((source_topic(lane), partition, copy.offset))
            if message is None:
                log.warning("record to copy is gone", lane=lane, offset=copy.offset)
                continue
            group = self._settings.group(group_name)
            assert group.retry_topic is not None
            origin = trusted_or_flagged(message, group.retry_topic).origin
            headers = copy_headers(message, origin, copy.delivery_count)
            reason = copy.dead_letter_reason or self._too_large_to_retry(message, headers)
            if reason is not None and copy.answer is not None:
                copy.answer["status"] = "dead_lettered"  # the caller learns what really happened
            if reason is None:
                self._retry(step, group, message, (origin, headers), copy, now)
            else:
                self._dead_letter(step, group, message, (origin, headers), copy, reason, now)

    def _too_large_to_retry(self, message: Message, headers: list[Header]) -> str | None:
        size = record_bytes(message.key(), message.value(), headers)
        limit = self._settings.max_record_bytes
        if size <= limit:
            return None
        return f"record of {size} bytes is over KPD_MAX_RECORD_BYTES ({limit}): cannot retry"

    def _retry(
        self,
        step: PopStep,
        group: GroupSettings,
        message: Message,
        copied: tuple[Origin, list[Header]],
        copy: Copy,
        now: int,
    ) -> None:
        origin, headers = copied
        assert group.retry_topic is not None
        if copy.delay_ms > 0:  # through the delay service: due later on the retry topic
            control: list[Header] = [
                ("kpd-target", group.retry_topic.encode()),
                ("kpd-delay-ms", str(copy.delay_ms).encode()),
            ]
            topic, headers = self._settings.buffer_topic, [*headers, *control]
        else:
            topic = group.retry_topic
        step.txn.produce(topic, message.key(), message.value(), headers=headers)
        step.log(
            Event.RETRIED, message, origin, copy.delivery_count, now,
            group=copy.key[0], due_ms=now + copy.delay_ms,
        )  # fmt: skip
        metrics.RETRIED.inc()

    def _dead_letter(
        self,
        step: PopStep,
        group: GroupSettings,
        message: Message,
        copied: tuple[Origin, list[Header]],
        copy: Copy,
        reason: str,
        now: int,
    ) -> None:
        origin, headers = copied
        assert group.dlq_topic is not None
        extra: list[Header] = [(DLQ_REASON, reason.encode()[:1000])]
        key, value, fitted_headers = fitted(
            message.key(), message.value(), headers, extra, self._limit
        )
        step.txn.produce(group.dlq_topic, key, value, headers=fitted_headers)
        step.log(
            Event.DEAD_LETTERED, message, origin, copy.delivery_count, now,
            group=copy.key[0], reason=reason,
        )  # fmt: skip
        name = copy.key[0]
        self._state.dead_lettered[name] = self._state.dead_lettered.get(name, 0) + 1
        metrics.DEAD_LETTERED.inc()
