"""Retry and dead-letter copies of a message (DESIGN: headers of retries and dead letters).

A message that must come back is copied, never moved: the copy carries where the message came
from (`kpd-origin-*`, kept from the first delivery on) and how often it was delivered, so the next
pop knows its delivery count and the DLQ tells operators what happened.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import Message

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


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a message was first produced; a retry copy's origin is its original's."""

    topic: str
    partition: int
    offset: int

    @classmethod
    def of(cls, message: Message) -> Origin:
        headers = dict(message.headers() or [])
        try:
            return cls(
                headers[ORIGIN_TOPIC].decode(),
                int(headers[ORIGIN_PARTITION]),
                int(headers[ORIGIN_OFFSET]),
            )
        except (KeyError, ValueError, AttributeError, UnicodeDecodeError):
            return cls(message.topic(), message.partition(), message.offset())


def previous_deliveries(message: Message) -> int:
    """Deliveries before this one: 0 for an original, the header's count for a retry copy."""
    for name, value in message.headers() or []:
        if name == DELIVERY_COUNT and value is not None and value.isdigit():
            return int(value)
    return 0


def user_headers(message: Message) -> list[tuple[str, bytes]]:
    return [(n, v or b"") for n, v in message.headers() or [] if n not in KPD_HEADERS]


def copy_headers(
    message: Message, delivery_count: int, reason: str | None = None
) -> list[tuple[str, bytes]]:
    origin = Origin.of(message)
    headers = [
        *user_headers(message),
        (DELIVERY_COUNT, str(delivery_count).encode()),
        (ORIGIN_TOPIC, origin.topic.encode()),
        (ORIGIN_PARTITION, str(origin.partition).encode()),
        (ORIGIN_OFFSET, str(origin.offset).encode()),
    ]
    if reason is not None:
        headers.append((DLQ_REASON, reason.encode()[:1000]))
    return headers
