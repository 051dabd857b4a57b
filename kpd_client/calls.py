"""The requests of kpd's HTTP API, as (method, path, body, timeout), shared by the sync and async
clients. Every name in a path is one quoted segment: a group or schedule id may be `.` or `..`
(both match the API's name patterns), which an HTTP client would otherwise resolve as a
directory step, sending the call to another route."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

Call = tuple[str, str, dict[str, Any] | None, float | None]  # method, path, body, timeout


def segment(name: str) -> str:
    """A name as one URL path segment: `/`, `..`, `?` and the like cannot reach another route."""
    quoted = quote(name, safe="")
    return quoted.replace(".", "%2E") if quoted in (".", "..") else quoted


def produce(topic: str, messages: list[dict[str, Any]]) -> Call:
    return "POST", f"/v1/topics/{segment(topic)}/messages", {"messages": messages}, None


def schedule(method: str, schedule_id: str) -> Call:
    """Read (GET) or cancel (DELETE) a schedule."""
    return method, f"/v1/schedules/{segment(schedule_id)}", None, None


def group(name: str) -> Call:
    return "GET", f"/v1/groups/{segment(name)}", None, None


def pop(group: str, topic: str, max_messages: int, invisible_ms: int | None, wait_ms: int) -> Call:
    body: dict[str, Any] = {"max_messages": max_messages, "wait_ms": wait_ms}
    if invisible_ms is not None:
        body["invisible_ms"] = invisible_ms
    path = f"/v1/groups/{segment(group)}/topics/{segment(topic)}/pop"
    return "POST", path, body, wait_ms / 1000 + 60


def settle(group: str, call: str, receipts: Iterable[str], **item: Any) -> Call:
    """ack (receipts), nack (delay_ms), leases (invisible_ms), reject (reason)."""
    body = (
        {"receipts": list(receipts)}
        if call == "ack"
        else {"items": [{"receipt": r, **item} for r in receipts]}
    )
    return "POST", f"/v1/groups/{segment(group)}/{call}", body, None
