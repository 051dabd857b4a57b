"""Delivery-log records (docs/reference.md: one JSON record per event on `kpd.delivery-log`)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import orjson


class Event(StrEnum):
    SCHEDULED = "scheduled"
    DELIVERED = "delivered"
    CANCELLED = "cancelled"
    RETRIED = "retried"
    DEAD_LETTERED = "dead-lettered"
    INVALID = "invalid"


def log_record(
    event: Event,
    record_id: str,
    target: str,
    *,
    due_ms: int | None,
    at_ms: int,
    enqueued_ms: int | None,
    node: str,
    delivery_count: int = 0,
    **extra: Any,
) -> bytes:
    """The JSON value; the record key is the id, so one id's events stay in order."""
    return orjson.dumps(
        {
            "event": str(event),
            "id": record_id,
            "target": target,
            "due_ms": due_ms,
            "at_ms": at_ms,
            "enqueued_ms": enqueued_ms,
            "delivery_count": delivery_count,
            "node": node,
            **extra,
        }
    )
