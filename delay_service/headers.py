"""Validate a buffer-topic record (DESIGN: Kafka-native contract) into a schedule or a cancel.

Anything wrong raises `InvalidRecord` with a reason that ends up in the `kpd-error` header of the
copy sent to `kpd.invalid`; parsing never raises anything else, whatever the bytes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import msgspec

from foundation.record_size import record_bytes
from foundation.topics import is_kafka_internal

TARGET = "kpd-target"
DELIVER_AT = "kpd-deliver-at"
DELAY_MS = "kpd-delay-ms"
ID = "kpd-id"
CANCEL = "kpd-cancel"
CONTROL_HEADERS = frozenset({TARGET, DELIVER_AT, DELAY_MS, ID, CANCEL})

ID_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,128}")
TOPIC_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,249}")
MAX_TIME_DIGITS = 15  # epoch ms stay 13 digits until year 2286; more is surely garbage

Headers = Sequence[tuple[str, bytes | None]]


class InvalidRecord(ValueError):
    """The record breaks the buffer-topic contract; `str(self)` says how."""


class ScheduleRequest(msgspec.Struct, frozen=True, gc=False):
    schedule_id: str
    target: str
    due_ms: int
    headers: tuple[tuple[str, bytes | None], ...]  # the user's (null values kept), no kpd ones


class CancelRequest(msgspec.Struct, frozen=True, gc=False):
    schedule_id: str


class Limits(msgspec.Struct, frozen=True, gc=False):
    max_delay_ms: int
    max_record_bytes: int
    forbidden_targets: frozenset[str]  # kpd's own topics: delivering into them would loop


def parse(
    headers: Headers | None,
    key: bytes | None,
    value: bytes | None,
    timestamp_ms: int,
    default_id: str,
    limits: Limits,
) -> ScheduleRequest | CancelRequest:
    control, user_headers = _split(headers or [])
    size = record_bytes(key, value, user_headers)
    if size > limits.max_record_bytes:
        raise InvalidRecord(f"record of {size} bytes exceeds the {limits.max_record_bytes} limit")
    if CANCEL in control:
        return CancelRequest(_schedule_id(control[CANCEL], CANCEL))
    if TARGET not in control:
        raise InvalidRecord(f"missing {TARGET} header")
    target = control[TARGET]
    if not TOPIC_PATTERN.fullmatch(target) or target in {".", ".."}:
        raise InvalidRecord(f"{TARGET} {target[:80]!r} is not a valid topic name")
    if target in limits.forbidden_targets:
        raise InvalidRecord(f"{TARGET} {target!r} is a kpd topic")
    if is_kafka_internal(target):
        raise InvalidRecord(f"{TARGET} {target!r} is a Kafka-internal topic")
    due_ms = _due_ms(control, timestamp_ms, limits.max_delay_ms)
    schedule_id = _schedule_id(control[ID], ID) if ID in control else default_id
    return ScheduleRequest(schedule_id, target, due_ms, user_headers)


def _split(headers: Headers) -> tuple[dict[str, str], tuple[tuple[str, bytes | None], ...]]:
    control: dict[str, str] = {}
    user: list[tuple[str, bytes | None]] = []
    for name, raw in headers:
        if name not in CONTROL_HEADERS:
            user.append((name, raw))  # a null header value stays null
            continue
        if name in control:
            raise InvalidRecord(f"header {name} given more than once")
        try:  # exactly as documented: no whitespace is trimmed ("x\n" is not the id "x")
            control[name] = (raw or b"").decode("ascii")
        except UnicodeDecodeError:
            raise InvalidRecord(f"header {name} is not ASCII") from None
    return control, tuple(user)


def _time(control: dict[str, str], name: str) -> int:
    text = control[name]
    if not text.isascii() or not text.isdigit():
        raise InvalidRecord(f"{name} {text[:40]!r} is not a non-negative decimal integer")
    if len(text) > MAX_TIME_DIGITS:
        raise InvalidRecord(f"{name} {text[:40]!r} is out of range")
    return int(text)


def _due_ms(control: dict[str, str], timestamp_ms: int, max_delay_ms: int) -> int:
    has_at, has_delay = DELIVER_AT in control, DELAY_MS in control
    if has_at == has_delay:
        raise InvalidRecord(f"exactly one of {DELIVER_AT} and {DELAY_MS} is required")
    if has_delay:
        delay = _time(control, DELAY_MS)
        if delay > max_delay_ms:
            raise InvalidRecord(f"{DELAY_MS} {delay} exceeds the max delay of {max_delay_ms} ms")
        return timestamp_ms + delay
    due = _time(control, DELIVER_AT)
    if due - timestamp_ms > max_delay_ms:
        raise InvalidRecord(f"{DELIVER_AT} {due} is beyond the max delay of {max_delay_ms} ms")
    return due


def _schedule_id(text: str, name: str) -> str:
    if not ID_PATTERN.fullmatch(text):
        raise InvalidRecord(f"{name} {text[:140]!r} must be 1..128 of [A-Za-z0-9._:-]")
    return text
