"""Retry and dead-letter copies of a message (DESIGN: headers of retries and dead letters).

A message that must come back is copied, never moved: the copy carries where the message came
from (`kpd-origin-*`, kept from the first delivery on) and how often it was delivered, so the next
pop knows its delivery count and the DLQ tells operators what happened.

Those headers are kpd's bookkeeping, trusted only on the group's retry topic, which kpd alone
writes, and only when they parse within range. Any producer can set them on any other topic: a
record on a user topic (a DLQ redrive, say) starts at delivery 1 whatever it carries, and a
retry-topic record with headers kpd cannot trust is dead-lettered with the reason.
"""

from __future__ import annotations

import re

import msgspec

from revive.source_record import Header, SourceRecord

DELIVERY_COUNT = "kpd-delivery-count"
ORIGIN_TOPIC = "kpd-origin-topic"
ORIGIN_PARTITION = "kpd-origin-partition"
ORIGIN_OFFSET = "kpd-origin-offset"
DLQ_REASON = "kpd-dlq-reason"
# Headers kpd sets on copies; a copy of a copy replaces them instead of piling them up.
KPD_HEADERS = frozenset(
    {
        DELIVERY_COUNT,
        ORIGIN_TOPIC,
        ORIGIN_PARTITION,
        ORIGIN_OFFSET,
        DLQ_REASON,
        "kpd-id",
        "kpd-deliver-at",
    }
)
MAX_PARTITION = 2**31 - 1
MAX_OFFSET = 2**63 - 1
MAX_DELIVERIES = 0xFFFE  # a copy's count + 1 must still fit the ledger's 16-bit counts
_DECIMAL = re.compile(rb"(0|[1-9][0-9]{0,18})")
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


class UntrustedHeaders(ValueError):
    """A retry-topic record whose kpd headers are missing, malformed or out of range."""


class Origin(msgspec.Struct, frozen=True, gc=False):
    """Where a message was first produced; a retry copy's origin is its original's."""

    topic: str
    partition: int
    offset: int

    @classmethod
    def here(cls, record: SourceRecord) -> Origin:
        return cls(record.topic, record.partition, record.offset)


class Provenance(msgspec.Struct, frozen=True, gc=False):
    origin: Origin
    previous_deliveries: int  # 0 for an original, the copy's count for a retry
    distrust: str | None = None  # why a retry copy's kpd headers cannot be trusted


def trusted_or_flagged(record: SourceRecord, retry_topic: str) -> Provenance:
    """`provenance`, or for a retry copy kpd cannot trust, its own place with the reason."""
    try:
        return provenance(record, retry_topic)
    except UntrustedHeaders as error:
        return Provenance(Origin.here(record), 0, str(error))


def provenance(record: SourceRecord, retry_topic: str) -> Provenance:
    """Origin and earlier deliveries of `record`; `UntrustedHeaders` for a bad retry copy."""
    if record.topic != retry_topic:
        return Provenance(Origin.here(record), 0)
    headers: dict[str, bytes | None] = {}
    for name, value in record.headers:
        if name in headers:
            raise UntrustedHeaders(f"header {name} appears twice")
        headers[name] = value
    topic = _field(headers, ORIGIN_TOPIC).decode("ascii", "replace")
    if not _TOPIC.fullmatch(topic):
        raise UntrustedHeaders(f"{ORIGIN_TOPIC} {topic[:80]!r} is not a topic name")
    return Provenance(
        Origin(
            topic,
            _number(headers, ORIGIN_PARTITION, MAX_PARTITION),
            _number(headers, ORIGIN_OFFSET, MAX_OFFSET),
        ),
        _number(headers, DELIVERY_COUNT, MAX_DELIVERIES, minimum=1),
    )


def _field(headers: dict[str, bytes | None], name: str) -> bytes:
    value = headers.get(name)
    if value is None:
        raise UntrustedHeaders(f"retry copy without {name}")
    return value


def _number(headers: dict[str, bytes | None], name: str, maximum: int, minimum: int = 0) -> int:
    raw = _field(headers, name)
    if _DECIMAL.fullmatch(raw) is None or not minimum <= int(raw) <= maximum:
        raise UntrustedHeaders(f"{name} {raw[:40]!r} is not a decimal in {minimum}..{maximum}")
    return int(raw)


def user_headers(record: SourceRecord) -> list[Header]:
    return [(n, v) for n, v in record.headers if n not in KPD_HEADERS]


def copy_headers(record: SourceRecord, origin: Origin, delivery_count: int) -> list[Header]:
    """The headers of a retry or dead-letter copy: the user's, and kpd's bookkeeping."""
    return [
        *user_headers(record),
        (DELIVERY_COUNT, str(delivery_count).encode()),
        (ORIGIN_TOPIC, origin.topic.encode()),
        (ORIGIN_PARTITION, str(origin.partition).encode()),
        (ORIGIN_OFFSET, str(origin.offset).encode()),
    ]
