"""Python client for kpd's HTTP API (httpx), sync and async, with a worker loop.

    from api.client import KpdClient

    with KpdClient("http://127.0.0.1:8080", token=None) as kpd:
        kpd.produce("orders", [{"value": "hello", "delay_ms": 5000}])
        for message in kpd.pop("workers", "orders", max_messages=10, wait_ms=20_000):
            ...
            kpd.ack("workers", [message.receipt])

`run_worker(client, group, topic, handler)` pops, calls `handler(message)`, acks on success,
nacks on an exception, and extends the lease in the background while a handler runs long.
"""

from __future__ import annotations

import asyncio
import base64
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import httpx


class KpdError(RuntimeError):
    """An error answer (RFC 9457 problem) from kpd; `code` is its stable machine code."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        super().__init__(f"{status} {problem.get('code')}: {problem.get('detail')}")
        self.status = status
        self.code = str(problem.get("code"))
        self.problem = problem


@dataclass(frozen=True)
class PoppedMessage:
    receipt: str
    topic: str
    partition: int
    offset: int
    key: str | None
    value: bytes | None
    headers: dict[str, str]
    timestamp_ms: int
    delivery_count: int
    invisible_until_ms: int

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PoppedMessage:
        if data.get("value_b64") is not None:
            value: bytes | None = base64.b64decode(data["value_b64"])
        else:
            value = None if data.get("value") is None else str(data["value"]).encode()
        return cls(
            data["receipt"],
            data["topic"],
            data["partition"],
            data["offset"],
            data.get("key"),
            value,
            data.get("headers") or {},
            data["timestamp_ms"],
            data["delivery_count"],
            data["invisible_until_ms"],
        )


# Answers that mean "leadership is moving": worth retrying for a short while.
RETRYABLE = frozenset({"leader_starting", "no_leader", "not_leader", "leader_unreachable"})
RETRY_FOR_S = 15.0


def _retryable(response: httpx.Response) -> bool:
    if response.status_code != 503:
        return False
    try:
        return response.json().get("code") in RETRYABLE
    except ValueError:
        return False


def _checked(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        try:
            problem = response.json()
        except ValueError:
            problem = {"code": "http_error", "detail": response.text[:500]}
        raise KpdError(response.status_code, problem)
    return None if response.status_code == 204 else response.json()


Call = tuple[str, str, dict[str, Any] | None, float | None]  # method, path, body, timeout


class _Calls:
    """Request shapes shared by the sync and async clients."""

    @staticmethod
    def pop(
        group: str, topic: str, max_messages: int, invisible_ms: int | None, wait_ms: int
    ) -> Call:
        body: dict[str, Any] = {"max_messages": max_messages, "wait_ms": wait_ms}
        if invisible_ms is not None:
            body["invisible_ms"] = invisible_ms
        return "POST", f"/v1/groups/{group}/topics/{topic}/pop", body, wait_ms / 1000 + 60

    @staticmethod
    def settle(group: str, call: str, receipts: Iterable[str], **item: Any) -> Call:
        """ack (receipts), nack (delay_ms), leases (invisible_ms), reject (reason)."""
        body = (
            {"receipts": list(receipts)}
            if call == "ack"
            else {"items": [{"receipt": r, **item} for r in receipts]}
        )
        return "POST", f"/v1/groups/{group}/{call}", body, None


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def _messages(data: dict[str, Any]) -> list[PoppedMessage]:
    return [PoppedMessage.from_json(m) for m in data["messages"]]


class KpdClient:
    """Synchronous client; httpx.Client is thread-safe, so one can serve many threads."""

    def __init__(self, base_url: str, token: str | None = None, timeout_s: float = 60) -> None:
        self._http = httpx.Client(base_url=base_url, headers=_headers(token), timeout=timeout_s)

    def __enter__(self) -> KpdClient:
        return self

    def __exit__(self, *_: object) -> None:
        self._http.close()

    def _call(self, call: Call) -> Any:
        method, path, body, timeout = call
        kwargs: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        deadline = time.monotonic() + RETRY_FOR_S
        response = self._http.request(method, path, json=body, **kwargs)
        while _retryable(response) and time.monotonic() < deadline:
            time.sleep(0.2)
            response = self._http.request(method, path, json=body, **kwargs)
        return _checked(response)

    def produce(self, topic: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        call = ("POST", f"/v1/topics/{topic}/messages", {"messages": messages}, None)
        return list(self._call(call)["results"])

    def schedule(self, schedule_id: str) -> dict[str, Any]:
        return dict(self._call(("GET", f"/v1/schedules/{schedule_id}", None, None)))

    def cancel(self, schedule_id: str) -> None:
        self._call(("DELETE", f"/v1/schedules/{schedule_id}", None, None))

    def group(self, group: str) -> dict[str, Any]:
        return dict(self._call(("GET", f"/v1/groups/{group}", None, None)))

    def pop(
        self,
        group: str,
        topic: str,
        max_messages: int = 10,
        invisible_ms: int | None = None,
        wait_ms: int = 0,
    ) -> list[PoppedMessage]:
        return _messages(self._call(_Calls.pop(group, topic, max_messages, invisible_ms, wait_ms)))

    def ack(self, group: str, receipts: Iterable[str]) -> list[dict[str, Any]]:
        return list(self._call(_Calls.settle(group, "ack", receipts))["results"])

    def nack(
        self,
        group: str,
        receipts: Iterable[str],
        delay_ms: int | None = None,
    ) -> list[dict[str, Any]]:
        return list(
            self._call(_Calls.settle(group, "nack", receipts, delay_ms=delay_ms))["results"]
        )

    def extend(
        self,
        group: str,
        receipts: Iterable[str],
        invisible_ms: int,
    ) -> list[dict[str, Any]]:
        call = _Calls.settle(group, "leases", receipts, invisible_ms=invisible_ms)
        return list(self._call(call)["results"])

    def reject(
        self,
        group: str,
        receipts: Iterable[str],
        reason: str | None = None,
    ) -> list[dict[str, Any]]:
        return list(self._call(_Calls.settle(group, "reject", receipts, reason=reason))["results"])


class AsyncKpdClient:
    """Asynchronous client for workers on asyncio: the pop-group calls."""

    def __init__(self, base_url: str, token: str | None = None, timeout_s: float = 60) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=_headers(token), timeout=timeout_s
        )

    async def __aenter__(self) -> AsyncKpdClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._http.aclose()

    async def _call(self, call: Call) -> Any:
        method, path, body, timeout = call
        kwargs: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        deadline = time.monotonic() + RETRY_FOR_S
        response = await self._http.request(method, path, json=body, **kwargs)
        while _retryable(response) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            response = await self._http.request(method, path, json=body, **kwargs)
        return _checked(response)

    async def pop(
        self,
        group: str,
        topic: str,
        max_messages: int = 10,
        invisible_ms: int | None = None,
        wait_ms: int = 0,
    ) -> list[PoppedMessage]:
        return _messages(
            await self._call(_Calls.pop(group, topic, max_messages, invisible_ms, wait_ms))
        )

    async def settle(
        self, group: str, call: str, receipts: Iterable[str], **item: Any
    ) -> list[dict[str, Any]]:
        """`call` is ack, nack (delay_ms=), leases (invisible_ms=) or reject (reason=)."""
        return list((await self._call(_Calls.settle(group, call, receipts, **item)))["results"])


def run_worker(
    client: KpdClient,
    group: str,
    topic: str,
    handler: Callable[[PoppedMessage], None],
    *,
    invisible_ms: int = 30_000,
    batch: int = 10,
    wait_ms: int = 20_000,
    stop: threading.Event | None = None,
) -> None:
    """Pop and handle messages until `stop` is set.

    Success acks; an exception nacks (the group's backoff decides when it returns). While a
    handler runs, its lease is extended every `invisible_ms / 3`, so a slow handler keeps the
    message invisible to other workers without picking a huge invisible time up front.
    """
    stop = stop or threading.Event()
    while not stop.is_set():
        for message in client.pop(group, topic, batch, invisible_ms, wait_ms):
            if stop.is_set():
                client.extend(group, [message.receipt], 0)  # hand it back at once
                continue
            done = threading.Event()
            keeper = threading.Thread(
                target=_keep_leased,
                args=(client, group, message.receipt, invisible_ms, done),
                daemon=True,
            )
            keeper.start()
            try:
                handler(message)
            except Exception:
                succeeded = False
            else:
                succeeded = True
            finally:
                done.set()
                keeper.join()
            if succeeded:
                client.ack(group, [message.receipt])
            else:
                client.nack(group, [message.receipt])


def _keep_leased(
    client: KpdClient, group: str, receipt: str, invisible_ms: int, done: threading.Event
) -> None:
    while not done.wait(invisible_ms / 3000):
        client.extend(group, [receipt], invisible_ms)
