"""Write the step's copies: retries (now, or later through the delay service) and dead letters.

Leases keep only offsets: a message is taken from what the leader still holds of what it handed
out (`revive.held_records`), or else read again from Kafka (`revive.reader`). Sizes are
checked before anything is written, so the broker never refuses a copy (docs/principles.md, 6): a
message too large to come back as a retry (bigger than `KPD_MAX_RECORD_BYTES` once kpd's headers
are on it) is dead-lettered with that reason instead, and a dead letter that cannot carry its
payload is written truncated (`foundation.record_size.fitted`), never not at all.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import structlog

from foundation.clock import now_ms
from foundation.config import GroupSettings, Settings
from foundation.delivery_log import Event
from foundation.record_size import Header, copy_limit, fitted, record_bytes
from foundation.wire import DELAY_MS, DLQ_REASON, TARGET
from revive import metrics
from revive.copies import Origin, copy_headers, provenance
from revive.held_records import HeldRecords, Place
from revive.lanes import source_topic
from revive.pop_state import PopState
from revive.pop_step import Copy, PopStep
from revive.reader import OffsetReader
from revive.source_record import SourceRecord

log = structlog.get_logger(__name__)


class Copier:
    def __init__(
        self,
        settings: Settings,
        state: PopState,
        reader: OffsetReader,
        held: HeldRecords,
        stamp: Callable[[str, str], int],  # (group, origin topic) -> its latest seek's stamp
    ) -> None:
        self._settings, self._state, self._reader, self._held = settings, state, reader, held
        self._stamp = stamp
        self._limit = copy_limit(settings.max_record_bytes)

    def write(self, step: PopStep) -> None:
        if not step.copies:
            return
        found = self.records([(copy.key, copy.offset) for copy in step.copies])
        now = now_ms()
        for copy in step.copies:
            record = found.get((copy.key, copy.offset))
            if record is None:
                log.warning("record to copy is gone", lane=copy.key[1], offset=copy.offset)
                continue
            group = self._settings.group(copy.key[0])
            assert group.retry_topic is not None
            origin = provenance(record, group.retry_topic).origin
            stamp = self._stamp(copy.key[0], origin.topic)
            headers = copy_headers(record, origin, copy.delivery_count, stamp)
            reason = copy.dead_letter_reason or self._too_large_to_retry(record, headers)
            if reason is not None and copy.answer is not None:
                copy.answer["status"] = "dead_lettered"  # the caller learns what really happened
            if reason is None:
                self._retry(step, group, record, (origin, headers), copy, now)
            else:
                self._dead_letter(step, group, record, (origin, headers), copy, reason, now)

    def records(self, places: list[Place]) -> dict[Place, SourceRecord]:
        """The leased records at `places` that still exist: held ones if still in their
        partition (one watermark look per partition: a record deleted since it was leased is
        gone), the others read back from Kafka."""
        found: dict[Place, SourceRecord] = {}
        held_in: dict[tuple[str, int], list[Place]] = defaultdict(list)
        wanted: dict[tuple[str, int, int], list[Place]] = defaultdict(list)
        for place in places:
            key, offset = place
            record = self._held.get(*place)
            if record is None:
                wanted[(source_topic(key[1]), key[2], offset)].append(place)
            else:
                found[place] = record
                held_in[(record.topic, record.partition)].append(place)
        for (topic, partition), places in held_in.items():
            present = self._reader.present(topic, partition, {offset for _, offset in places})
            for place in places:
                if place[1] not in present:
                    del found[place]
        if wanted:
            metrics.COPY_READS.inc(len(wanted))
            for at, read in self._reader.read(set(wanted)).items():
                found.update((place, read) for place in wanted[at])
        return found

    def _too_large_to_retry(self, record: SourceRecord, headers: list[Header]) -> str | None:
        size = record_bytes(record.key, record.value, headers)
        limit = self._settings.max_record_bytes
        if size <= limit:
            return None
        return f"record of {size} bytes is over KPD_MAX_RECORD_BYTES ({limit}): cannot retry"

    def _retry(
        self,
        step: PopStep,
        group: GroupSettings,
        record: SourceRecord,
        copied: tuple[Origin, list[Header]],
        copy: Copy,
        now: int,
    ) -> None:
        origin, headers = copied
        assert group.retry_topic is not None
        if copy.delay_ms > 0:  # through the delay service: due later on the retry topic
            control: list[Header] = [
                (TARGET, group.retry_topic.encode()),
                (DELAY_MS, str(copy.delay_ms).encode()),
            ]
            topic, headers = self._settings.buffer_topic, [*headers, *control]
        else:
            topic = group.retry_topic
        step.txn.produce(topic, record.key, record.value, headers=headers)
        step.log(
            Event.RETRIED, record, origin, copy.delivery_count, now,
            group=copy.key[0], due_ms=now + copy.delay_ms,
        )  # fmt: skip
        metrics.RETRIED.inc()

    def _dead_letter(
        self,
        step: PopStep,
        group: GroupSettings,
        record: SourceRecord,
        copied: tuple[Origin, list[Header]],
        copy: Copy,
        reason: str,
        now: int,
    ) -> None:
        origin, headers = copied
        assert group.dlq_topic is not None
        extra: list[Header] = [(DLQ_REASON, reason.encode()[:1000])]
        key, value, fitted_headers = fitted(record.key, record.value, headers, extra, self._limit)
        step.txn.produce(group.dlq_topic, key, value, headers=fitted_headers)
        step.log(
            Event.DEAD_LETTERED, record, origin, copy.delivery_count, now,
            group=copy.key[0], reason=reason,
        )  # fmt: skip
        name = copy.key[0]
        self._state.dead_lettered[name] = self._state.dead_lettered.get(name, 0) + 1
        metrics.DEAD_LETTERED.inc()
