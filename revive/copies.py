"""Retry and dead-letter copies of a message (their headers: docs/reference.md).

A message that must come back is copied, never moved: the copy carries where the message came
from (`kpd-origin-*`, kept from the first delivery on) and how often it was delivered, so the next
pop knows its delivery count and the DLQ tells operators what happened.

Those headers are kpd's bookkeeping, trusted only on the group's retry topic, which kpd alone
writes, and only when they parse within range. Any producer can set them on any other topic: a
record on a user topic (a DLQ redrive, say) starts at delivery 1 whatever it carries, and a
retry-topic record with headers kpd cannot trust is dead-lettered with the reason.

The compiled core reads them (`kpd_core`): `provenance(record, retry_topic)` gives a record's
`Provenance`: its `Origin` (topic, partition, offset: its own place for an original),
`previous_deliveries` (0 for an original, the copy's count for a retry) and `distrust`, why a
retry copy cannot be trusted (then its origin is its own place). Trusted means: each header
once; `kpd-origin-topic` a topic name; `kpd-origin-partition` a decimal in 0..2**31-1,
`kpd-origin-offset` in 0..2**63-1, and `kpd-delivery-count` in 0..65534 (0: a redriven dead
letter, `revive.redrive`; the next delivery's count must fit the ledger's 16 bits); decimals
without sign, spaces or leading zeros.
"""

from __future__ import annotations

from typing import Any

from kpd_core import Origin as Origin
from kpd_core import Provenance as Provenance
from kpd_core import provenance as provenance

from foundation.delivery_log import Event, log_record
from foundation.wire import (
    DELIVER_AT,
    DELIVERY_COUNT,
    DLQ_REASON,
    ID,
    ORIGIN_OFFSET,
    ORIGIN_PARTITION,
    ORIGIN_SEEK,
    ORIGIN_TOPIC,
)
from revive import seek_stamps
from revive.source_record import Header, SourceRecord

# Headers kpd sets on copies; a copy of a copy replaces them instead of piling them up.
KPD_HEADERS = frozenset(
    {
        *(DELIVERY_COUNT, ORIGIN_TOPIC, ORIGIN_PARTITION, ORIGIN_OFFSET, ORIGIN_SEEK),
        *(DLQ_REASON, ID, DELIVER_AT),
    }
)


def copy_event(
    event: Event,
    record: SourceRecord,
    origin: Origin,
    delivery_count: int,
    at_ms: int,
    node: str,
    **extra: Any,
) -> tuple[str, bytes]:
    """A delivery-log event of a message (retried, dead-lettered, delivered by a pop): its id
    (`topic:partition:offset` of its origin) and the rendered value."""
    record_id = f"{origin.topic}:{origin.partition}:{origin.offset}"
    extra.setdefault("due_ms", None)
    value = log_record(
        event, record_id, origin.topic, at_ms=at_ms, enqueued_ms=record.timestamp_ms, node=node,
        delivery_count=delivery_count, partition=origin.partition, offset=origin.offset, **extra,
    )  # fmt: skip
    return record_id, value


def user_headers(record: SourceRecord) -> list[Header]:
    return [(n, v) for n, v in record.headers if n not in KPD_HEADERS]


def copy_headers(
    record: SourceRecord, origin: Origin, delivery_count: int, stamp: int = 0
) -> list[Header]:
    """The headers of a retry or dead-letter copy: the user's, and kpd's bookkeeping (`stamp`:
    the latest seek of the origin topic its maker knew, `revive.seek_stamps`)."""
    return [
        *user_headers(record),
        (DELIVERY_COUNT, str(delivery_count).encode()),
        (ORIGIN_TOPIC, origin.topic.encode()),
        (ORIGIN_PARTITION, str(origin.partition).encode()),
        (ORIGIN_OFFSET, str(origin.offset).encode()),
        *seek_stamps.header(stamp),
    ]
