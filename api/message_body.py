"""One message as the API takes it: in `POST /v1/topics/{topic}/messages` (`api.messages`) and
in an ack call's `produce` list (`api.ack_produce`), with the checks both make of it."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated

from pydantic import Field, model_validator

from api.request_body import RequestBody
from api.schedules import ID_PATTERN
from delay_service.headers import CONTROL_HEADERS, DELIVER_AT, ID, TARGET
from foundation.problem import Problem
from foundation.record_size import record_bytes


class MessageIn(RequestBody):
    """One message: `value` or `value_b64` (not both); `delay_ms` or `deliver_at_ms` (not both)
    to schedule it; `id` only with one of them. kpd's control headers are refused."""

    key: str | None = None
    value: str | None = None
    value_b64: str | None = None
    headers: dict[Annotated[str, Field(min_length=1, max_length=255)], str] | None = Field(
        None, max_length=100
    )
    delay_ms: int | None = Field(None, ge=0)
    deliver_at_ms: int | None = Field(None, ge=0)
    id: str | None = Field(None, pattern=ID_PATTERN)

    @model_validator(mode="after")
    def _one_of_each(self) -> MessageIn:
        if self.value is not None and self.value_b64 is not None:
            raise ValueError("give value or value_b64, not both")
        if self.delay_ms is not None and self.deliver_at_ms is not None:
            raise ValueError("give delay_ms or deliver_at_ms, not both")
        if self.value_b64 is not None:
            try:
                base64.b64decode(self.value_b64, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError("value_b64 is not valid base64") from None
        texts = [self.key, self.value, *(self.headers or {}), *(self.headers or {}).values()]
        for text in texts:
            try:
                (text or "").encode()
            except UnicodeEncodeError:  # JSON allows lone surrogates like "\ud800"; UTF-8 not
                raise ValueError("key, value and headers must be valid Unicode text") from None
        if self.headers and CONTROL_HEADERS & set(self.headers):
            raise ValueError(f"headers may not set kpd control headers {sorted(CONTROL_HEADERS)}")
        if self.id is not None and self.delay_ms is None and self.deliver_at_ms is None:
            raise ValueError("id names a schedule: give delay_ms or deliver_at_ms with it")
        return self

    def payload(self) -> bytes | None:
        if self.value_b64 is not None:
            return base64.b64decode(self.value_b64)
        return None if self.value is None else self.value.encode()

    def header_list(self) -> list[tuple[str, bytes]]:
        return [(name, value.encode()) for name, value in (self.headers or {}).items()]

    def size(self) -> int:
        """Counted as the buffer ingest counts it, so what HTTP accepts the delay service does."""
        return record_bytes(self.key_bytes(), self.payload(), self.header_list())

    def key_bytes(self) -> bytes | None:
        return None if self.key is None else self.key.encode()


def check_size(field: str, message: MessageIn, max_bytes: int) -> None:
    """413 when `message` (at `field` of the body) is larger than a record may be."""
    size = message.size()  # decodes value_b64: once
    if size > max_bytes:
        raise Problem(
            413,
            "record_too_large",
            f"{field} is {size} bytes; the limit is {max_bytes}",
            field=field,
            max_bytes=max_bytes,
        )


def due_ms(field: str, message: MessageIn, now: int, max_delay_ms: int) -> int | None:
    """When `message` (at `field` of the body) is due; None when it is not scheduled."""
    if message.delay_ms is not None:
        delay = message.delay_ms
    elif message.deliver_at_ms is not None:
        delay = message.deliver_at_ms - now
    else:
        return None
    if delay > max_delay_ms:
        name = "delay_ms" if message.delay_ms is not None else "deliver_at_ms"
        raise Problem(
            422,
            "invalid_request",
            "request failed validation",
            errors=[
                {
                    "field": f"body.{field}.{name}",
                    "message": f"the delay may be at most {max_delay_ms} ms",
                    "bounds": {"ge": 0, "max_delay_ms": max_delay_ms},
                }
            ],
        )
    return now + delay if message.delay_ms is not None else message.deliver_at_ms


def check_topic_name(field: str, topic: str) -> None:
    """The topic pattern lets `.` and `..` through; Kafka never names a topic so."""
    if topic in (".", ".."):
        raise Problem(
            422,
            "invalid_request",
            "request failed validation",
            errors=[{"field": field, "message": f"{topic!r} is not a valid topic name"}],
        )


def schedule_headers(
    message: MessageIn, target: str, due: int, schedule_id: str
) -> list[tuple[str, bytes]]:
    """The headers of `message` on the buffer topic: its own, then the schedule's."""
    control = [(TARGET, target), (DELIVER_AT, str(due)), (ID, schedule_id)]
    return [*message.header_list(), *((name, value.encode()) for name, value in control)]
