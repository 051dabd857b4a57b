"""How big a record is, and a copy of it that always fits (docs/principles.md, 6).

Limits agree end to end: kpd accepts records of at most `KPD_MAX_RECORD_BYTES` (key + value +
headers, each header counting `HEADER_FRAMING_BYTES` for its framing), and every topic and
producer of kpd takes that plus `ENVELOPE_BYTES` for what kpd adds (control headers, state-record
fields, batch framing). So whatever kpd accepted it can always write: to the schedules topic, the
target, a retry or dead-letter topic, the invalid topic. A record kpd could not carry (it came in
bigger than the limit) is settled as a truncated copy: its headers, as many as fit, and a
`kpd-truncated` header saying what was dropped, never nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from foundation.wire import TRUNCATED

ENVELOPE_BYTES = 16 * 1024
HEADER_FRAMING_BYTES = 8

Header = tuple[str, bytes | None]


def header_bytes(headers: Sequence[Header]) -> int:
    if not headers:  # most records: no generator to build (a pop counts each record it holds)
        return 0
    framing = HEADER_FRAMING_BYTES
    return sum(len(name.encode()) + len(value or b"") + framing for name, value in headers)


def record_bytes(key: bytes | None, value: bytes | None, headers: Sequence[Header]) -> int:
    return len(key or b"") + len(value or b"") + header_bytes(headers)


def message_limit(max_record_bytes: int) -> int:
    """`message.max.bytes` of kpd's producers and `max.message.bytes` of kpd's topics."""
    return max_record_bytes + ENVELOPE_BYTES


def copy_limit(max_record_bytes: int) -> int:
    """The largest copy kpd writes: half the envelope stays free for the batch framing."""
    return max_record_bytes + ENVELOPE_BYTES // 2


def fitted(
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header],
    extra: Sequence[Header],
    limit: int,
) -> tuple[bytes | None, bytes | None, list[Header]]:
    """The copy to write: the record plus `extra` headers if it fits in `limit`; else no key or
    value, the `extra` headers, as many of the record's headers as fit, and `kpd-truncated`."""
    size = record_bytes(key, value, headers) + header_bytes(extra)
    if size <= limit:
        return key, value, [*headers, *extra]
    budget = limit // 2 - header_bytes(extra)
    kept: list[Header] = []
    for header in headers:
        budget -= header_bytes([header])
        if budget < 0:
            break
        kept.append(header)
    note = (
        f"original record of {size} bytes exceeds {limit}: key and value dropped, "
        f"{len(kept)} of {len(headers)} headers kept"
    )
    return None, None, [*kept, *extra, (TRUNCATED, note.encode())]
