"""The requests of kpd's HTTP API, shared by the sync and async clients. Every name in a path is
one quoted segment: a group or schedule id may be `.` or `..` (both match the API's name
patterns), which an HTTP client would otherwise resolve as a directory step, sending the call to
another route."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple
from urllib.parse import quote


class Call(NamedTuple):
    method: str
    path: str
    body: dict[str, Any] | None
    wait_s: float = 0.0  # how long the sidecar may hold the call on purpose (a long poll)
    # Safe to send to another sidecar after one took it and gave no answer. Not a produce: one
    # sidecar may have written its plain messages already, and they would be written twice.
    # Pops (what the lost answer leased comes back when its lease ends), settles and schedule
    # calls (each answers as the first one left things) are.
    resend: bool = True


def segment(name: str) -> str:
    """A name as one URL path segment: `/`, `..`, `?` and the like cannot reach another route."""
    quoted = quote(name, safe="")
    return quoted.replace(".", "%2E") if quoted in (".", "..") else quoted


def produce(topic: str, messages: list[dict[str, Any]]) -> Call:
    path = f"/v1/topics/{segment(topic)}/messages"
    return Call("POST", path, {"messages": messages}, resend=False)


def schedule(method: str, schedule_id: str) -> Call:
    """Read (GET) or cancel (DELETE) a schedule."""
    return Call(method, f"/v1/schedules/{segment(schedule_id)}", None)


def group(name: str) -> Call:
    return Call("GET", f"/v1/groups/{segment(name)}", None)


def pop(group: str, topic: str, max_messages: int, invisible_ms: int | None, wait_ms: int) -> Call:
    body: dict[str, Any] = {"max_messages": max_messages, "wait_ms": wait_ms}
    if invisible_ms is not None:
        body["invisible_ms"] = invisible_ms
    path = f"/v1/groups/{segment(group)}/topics/{segment(topic)}/pop"
    return Call("POST", path, body, wait_s=wait_ms / 1000)


def settle(group: str, call: str, receipts: Iterable[str], **item: Any) -> Call:
    """ack (receipts), nack (delay_ms), leases (invisible_ms), reject (reason)."""
    body = (
        {"receipts": list(receipts)}
        if call == "ack"
        else {"items": [{"receipt": r, **item} for r in receipts]}
    )
    return Call("POST", f"/v1/groups/{segment(group)}/{call}", body)


def ack_produce(
    group: str, receipts: Iterable[str], produce: list[dict[str, Any]], request_id: str
) -> Call:
    """Acks and records in one transaction; resent safely: `request_id` makes a retry answer
    as the first call did."""
    body = {"receipts": list(receipts), "produce": produce, "request_id": request_id}
    return Call("POST", f"/v1/groups/{segment(group)}/ack", body)


def redrive(group: str, max_messages: int, topic: str | None) -> Call:
    """Dead letters back to the group; resent safely: each goes back once whatever the calls."""
    body: dict[str, Any] = {"max_messages": max_messages}
    if topic is not None:
        body["topic"] = topic
    return Call("POST", f"/v1/groups/{segment(group)}/redrive", body)


def delete_group(group: str, topics: bool) -> Call:
    """Forget the group (and with `topics` delete its retry and DLQ topics); resent safely."""
    query = "?topics=true" if topics else ""
    return Call("DELETE", f"/v1/groups/{segment(group)}{query}", None)


def seek(group: str, topic: str, to: str | None, time_ms: int | None) -> Call:
    """The group's position in `topic`: an end (`to`) or a time; resent safely."""
    body: dict[str, Any] = {"to": to} if to is not None else {"time_ms": time_ms}
    return Call("POST", f"/v1/groups/{segment(group)}/topics/{segment(topic)}/seek", body)
