"""Messages for `kpd produce`: from its flags, or one JSON object per stdin line.

Stdin is read and checked whole before anything is sent (a malformed line 5000 must not leave
lines 1-4999 half sent), spooled to a temporary file so memory stays flat, then sent in batches.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import IO, Any

# The API's message shape (docs/reference.md: POST /v1/topics/{topic}/messages).
TEXT_FIELDS = ("key", "value", "value_b64", "id")
COUNT_FIELDS = ("delay_ms", "deliver_at_ms")
FIELDS = {*TEXT_FIELDS, *COUNT_FIELDS, "headers"}
# One call carries at most 1000 messages (the API's bound) and about this many bytes of JSON,
# well under the sidecar's default 16 MiB request limit.
BATCH_MESSAGES = 1000
BATCH_BYTES = 4 * 1024 * 1024
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class UsageError(ValueError):
    """The command line or its input is malformed: exit 2, nothing sent."""


def deliver_at_ms(text: str) -> int:
    """Epoch milliseconds, or an ISO-8601 time with a zone (naive times are refused: whose clock
    they meant is a guess, and a wrong guess delivers hours off). Sub-millisecond digits round
    up, so a delivery is never earlier than the time given."""
    if text.isascii() and text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"--deliver-at {text!r}: expected epoch milliseconds or an ISO-8601 time with a "
            "zone, e.g. 2026-11-01T09:00:00Z"
        ) from None
    if moment.tzinfo is None:
        raise UsageError(
            f"--deliver-at {text!r} has no time zone: add Z (UTC) or an offset like +01:00"
        )
    milliseconds = -((EPOCH - moment) // timedelta(milliseconds=1))  # ceiling division
    if milliseconds < 0:
        raise UsageError(f"--deliver-at {text!r} is before 1970-01-01T00:00:00Z")
    return milliseconds


def header_pairs(pairs: list[str]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not name:
            raise UsageError(f"--header {pair!r}: expected NAME=VALUE")
        if name in headers:
            raise UsageError(f"--header {name!r} given twice")
        headers[name] = value
    return headers


def message_from_flags(
    value: str,
    key: str | None,
    headers: list[str],
    delay_ms: int | None,
    deliver_at: str | None,
    schedule_id: str | None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"value": value}
    if key is not None:
        message["key"] = key
    if headers:
        message["headers"] = header_pairs(headers)
    if delay_ms is not None:
        message["delay_ms"] = delay_ms
    if deliver_at is not None:
        message["deliver_at_ms"] = deliver_at_ms(deliver_at)
    if schedule_id is not None:
        if delay_ms is None and deliver_at is None:
            raise UsageError("--id names a schedule: give --delay-ms or --deliver-at with it")
        message["id"] = schedule_id
    return message


def check_line(number: int, text: str) -> dict[str, Any]:
    """One stdin line as an API message; UsageError naming the line when it is not one."""
    try:
        message = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise UsageError(f"stdin line {number}: not JSON ({error})") from None
    if not isinstance(message, dict):
        raise UsageError(f'stdin line {number}: expected a JSON object like {{"value": ...}}')
    problem = _shape_problem(message)
    if problem:
        raise UsageError(f"stdin line {number}: {problem}")
    return message


def _shape_problem(message: dict[str, Any]) -> str | None:
    unknown = sorted(set(message) - FIELDS)
    if unknown:
        return f"unknown field(s) {', '.join(unknown)} (known: {', '.join(sorted(FIELDS))})"
    for name in TEXT_FIELDS:
        if not isinstance(message.get(name, ""), str | None):
            return f"{name} must be a string"
    for name in COUNT_FIELDS:
        count = message.get(name, 0)
        if count is not None and (type(count) is not int or count < 0):
            return f"{name} must be a whole number >= 0"
    headers = message.get("headers") or {}
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        return "headers must be an object of string values"
    for first, second in (("value", "value_b64"), ("delay_ms", "deliver_at_ms")):
        if message.get(first) is not None and message.get(second) is not None:
            return f"give {first} or {second}, not both"
    return None


def stdin_lines(stdin: IO[bytes]) -> Iterator[tuple[int, str]]:
    """(line number, text) of the non-blank lines; UsageError at a line that is not UTF-8."""
    for number, raw in enumerate(stdin, start=1):
        try:
            line = raw.decode()
        except UnicodeDecodeError:
            raise UsageError(f"stdin line {number}: not UTF-8 text") from None
        if line.strip():
            yield number, line.strip()


@contextmanager
def spooled_stdin(stdin: IO[bytes]) -> Iterator[IO[str]]:
    """Check every line and copy them to a temporary file; yields the file, rewound.
    UsageError at the first malformed line, before anything is sent."""
    with tempfile.TemporaryFile("w+", encoding="utf-8") as spool:
        messages = 0
        for number, line in stdin_lines(stdin):
            check_line(number, line)
            spool.write(line + "\n")
            messages += 1
        if not messages:
            raise UsageError("no message given: use --value, or one JSON object per stdin line")
        spool.seek(0)
        yield spool


def batches(lines: IO[str]) -> Iterator[list[dict[str, Any]]]:
    """Checked lines as message lists of at most BATCH_MESSAGES and about BATCH_BYTES each."""
    batch: list[dict[str, Any]] = []
    size = 0
    for line in lines:
        if batch and (len(batch) == BATCH_MESSAGES or size + len(line) > BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(json.loads(line))
        size += len(line)
    if batch:
        yield batch
