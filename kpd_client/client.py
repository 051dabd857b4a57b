"""Python client for kpd's HTTP API (httpx), sync and async, with a worker loop.

    from kpd_client import KpdClient

    with KpdClient("http://127.0.0.1:8080", token=None) as kpd:
        kpd.produce("orders", [{"value": "hello", "delay_ms": 5000}])
        for message in kpd.pop("workers", "orders", max_messages=10, wait_ms=20_000):
            ...
            kpd.ack("workers", [message.receipt])

`run_worker(client, group, topic, handler)` (`kpd_client.worker`) pops, calls `handler(message)`,
acks on success, nacks on an exception, and extends the lease while a handler runs long.

While leadership moves, kpd answers 503 with a `Retry-After` header; calls wait that long and try
again (with stamina) until `retry_deadline_s` (default 15 s) has passed, then raise `KpdError`.
A settle call (ack, nack, extend, reject) whose receipts span shards answers per receipt: those
of a shard whose leader moves come back `unavailable` and are sent again, alone, on the same
terms; what the other shards settled is kept. How a call reaches the sidecars, and which
failures send it on to the next one: `kpd_client.base_client`.
"""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import httpx
import stamina

from kpd_client import calls
from kpd_client.base_client import UNANSWERED, UNREACHABLE, BaseClient, checked_answer
from kpd_client.calls import Call
from kpd_client.retry import retry_while_moving, unsettled


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


# The backoff hook alone decides when to stop (it knows each call's deadline).
_RETRYING = stamina.RetryingCaller(attempts=None, timeout=None)
_ASYNC_RETRYING = stamina.AsyncRetryingCaller(attempts=None, timeout=None)


def _messages(data: dict[str, Any]) -> list[PoppedMessage]:
    return [PoppedMessage.from_json(m) for m in data["messages"]]


class KpdClient(BaseClient):
    """Synchronous client; httpx.Client is thread-safe, so one can serve many threads."""

    _http_class = httpx.Client

    def __enter__(self) -> KpdClient:
        return self

    def __exit__(self, *_: object) -> None:
        self._http.close()

    def _call(self, call: Call, deadline: float | None = None) -> Any:
        backoff = retry_while_moving(self._deadline() if deadline is None else deadline)
        return _RETRYING(backoff, self._once, call)

    def _settle(
        self, group: str, call: str, receipts: Iterable[str], **item: Any
    ) -> list[dict[str, Any]]:
        receipts, deadline = list(receipts), self._deadline()
        first = self._call(calls.settle(group, call, receipts, **item), deadline)
        results = list(first["results"])
        while (again := unsettled(results, deadline)) is not None:
            places, wait_s = again
            time.sleep(wait_s)
            settle = calls.settle(group, call, places.of(receipts), **item)
            places.fill(results, self._call(settle, deadline)["results"])
        return results

    def _once(self, call: Call) -> Any:
        urls = self._sidecars.in_turn()
        while True:
            url = urls.pop(0)
            try:
                return checked_answer(self._http.request(**self._request(url, call)))
            except (*UNREACHABLE, *UNANSWERED) as error:  # the next sidecar answers as well
                if not self._goes_on(url, call, error) or not urls:
                    raise

    def produce(self, topic: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return list(self._call(calls.produce(topic, messages))["results"])

    def schedule(self, schedule_id: str) -> dict[str, Any]:
        return dict(self._call(calls.schedule("GET", schedule_id)))

    def cancel(self, schedule_id: str) -> None:
        self._call(calls.schedule("DELETE", schedule_id))

    def group(self, group: str) -> dict[str, Any]:
        return dict(self._call(calls.group(group)))

    def pop(
        self,
        group: str,
        topic: str,
        max_messages: int = 10,
        invisible_ms: int | None = None,
        wait_ms: int = 0,
    ) -> list[PoppedMessage]:
        return _messages(self._call(calls.pop(group, topic, max_messages, invisible_ms, wait_ms)))

    def ack(
        self,
        group: str,
        receipts: Iterable[str],
        produce: list[dict[str, Any]] | None = None,
        request_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """Ack receipts. With `produce` (messages as `produce` takes them, each with its
        `topic`; all receipts of one shard), the acks and the records commit in one Kafka
        transaction, or nothing changes and `KpdError` says why (409 `not_acked`: its
        `problem["results"]`). Such a call carries `request_id` (a new one unless given), so
        a retry after a lost answer answers as the first call did."""
        if produce is None:
            return self._settle(group, "ack", receipts)
        call = calls.ack_produce(group, receipts, produce, request_id or uuid.uuid4().hex)
        return list(self._call(call)["results"])

    def nack(
        self, group: str, receipts: Iterable[str], delay_ms: int | None = None
    ) -> list[dict[str, Any]]:
        return self._settle(group, "nack", receipts, delay_ms=delay_ms)

    def extend(
        self, group: str, receipts: Iterable[str], invisible_ms: int
    ) -> list[dict[str, Any]]:
        return self._settle(group, "leases", receipts, invisible_ms=invisible_ms)

    def reject(
        self, group: str, receipts: Iterable[str], reason: str | None = None
    ) -> list[dict[str, Any]]:
        return self._settle(group, "reject", receipts, reason=reason)

    def redrive(
        self, group: str, max_messages: int = 10_000, topic: str | None = None
    ) -> dict[str, int]:
        """Up to `max_messages` of the group's dead letters (of `topic`'s only, if given) back
        to the group: `{"moved", "remaining"}`."""
        return dict(self._call(calls.redrive(group, max_messages, topic)))

    def delete_group(self, group: str, topics: bool = False) -> list[str]:
        """Forget the group: its leases, positions and waiting retries (`topics`: also delete
        its retry and DLQ topics). The topics deleted."""
        return list(self._call(calls.delete_group(group, topics))["deleted_topics"])

    def seek(
        self, group: str, topic: str, to: str | None = None, time_ms: int | None = None
    ) -> list[dict[str, int]]:
        """Move the group's position in every partition of `topic`: `to="earliest"`,
        `to="latest"` (purge), or `time_ms`: the first message at or after that time. Earlier
        messages are never handed out again; their receipts answer `superseded`, their pending
        retries are dropped. The new `[{"partition", "offset"}]`."""
        return list(self._call(calls.seek(group, topic, to, time_ms))["partitions"])


class AsyncKpdClient(BaseClient):
    """Asynchronous client for workers on asyncio: the pop-group calls."""

    _http_class = httpx.AsyncClient

    async def __aenter__(self) -> AsyncKpdClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._http.aclose()

    async def _call(self, call: Call, deadline: float | None = None) -> Any:
        backoff = retry_while_moving(self._deadline() if deadline is None else deadline)
        return await _ASYNC_RETRYING(backoff, self._once, call)

    async def _once(self, call: Call) -> Any:
        urls = self._sidecars.in_turn()
        while True:
            url = urls.pop(0)
            try:
                return checked_answer(await self._http.request(**self._request(url, call)))
            except (*UNREACHABLE, *UNANSWERED) as error:  # the next sidecar answers as well
                if not self._goes_on(url, call, error) or not urls:
                    raise

    async def pop(
        self,
        group: str,
        topic: str,
        max_messages: int = 10,
        invisible_ms: int | None = None,
        wait_ms: int = 0,
    ) -> list[PoppedMessage]:
        return _messages(
            await self._call(calls.pop(group, topic, max_messages, invisible_ms, wait_ms))
        )

    async def settle(
        self, group: str, call: str, receipts: Iterable[str], **item: Any
    ) -> list[dict[str, Any]]:
        """`call` is ack, nack (delay_ms=), leases (invisible_ms=) or reject (reason=)."""
        receipts, deadline = list(receipts), self._deadline()
        first = await self._call(calls.settle(group, call, receipts, **item), deadline)
        results = list(first["results"])
        while (again := unsettled(results, deadline)) is not None:
            places, wait_s = again
            await asyncio.sleep(wait_s)
            settle = calls.settle(group, call, places.of(receipts), **item)
            places.fill(results, (await self._call(settle, deadline))["results"])
        return results
