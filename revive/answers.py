"""A popped message as the HTTP API shows it (DESIGN: pop answer fields)."""

from __future__ import annotations

import base64
from typing import Any

from revive.copies import Origin, user_headers
from revive.source_record import SourceRecord


def message_json(
    record: SourceRecord, origin: Origin, receipt: str, count: int, invisible_until: int
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "receipt": receipt,
        "topic": origin.topic,
        "partition": origin.partition,
        "offset": origin.offset,
        "key": _text(record.key),
        "headers": {n: (v or b"").decode("utf-8", "replace") for n, v in user_headers(record)},
        "timestamp_ms": record.timestamp_ms,
        "delivery_count": count,
        "invisible_until_ms": invisible_until,
    }
    value = record.value
    text = _text(value)
    if value is not None and text is None:
        body["value_b64"] = base64.b64encode(value).decode()
    else:
        body["value"] = text
    return body


def _text(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None
