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
terms; what the other shards settled is kept.
"""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import stamina

from kpd_client import calls
from kpd_client.calls import Call
from kpd_client.retry import (
    RETRY_DEADLINE_S,
    KpdError,
    retry_after_s,
    retry_while_moving,
    unsettled,
)
from kpd_client.sidecars import Sidecars

# An idle connection is reused for at most this long. A sidecar closes connections idle for
# KPD_HTTP_KEEP_ALIVE_MS (5 s by default); httpx's own default is also 5 s, so a call sent on a
# connection idle for just under 5 s could meet the sidecar's close and fail with "Server
# disconnected without sending a response". Keep this below the sidecar's keep-alive.
IDLE_CONNECTION_S = 2.0
# A sidecar whose host does not answer a connect (gone, cut off) is skipped after this long, not
# after the call's whole timeout (60 s by default); a refused connect is skipped at once.
CONNECT_TIMEOUT_S = 5.0
UNREACHABLE = (httpx.ConnectError, httpx.ConnectTimeout)  # nothing was sent: any call goes on
# The call was sent and no answer came (the sidecar paused or cut off, or it died mid-call): a
# call safe to send twice (`Call.resend`) goes on to the next sidecar.
UNANSWERED = (
    httpx.ReadTimeout, httpx.WriteTimeout, httpx.ReadError, httpx.WriteError,
    httpx.RemoteProtocolError,
)  # fmt: skip
# httpx's default pool sizes, with that idle expiry.
CONNECTION_LIMITS = httpx.Limits(
    max_connections=100, max_keepalive_connections=20, keepalive_expiry=IDLE_CONNECTION_S
)


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


def _checked(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        try:
            problem = response.json()
        except ValueError:
            problem = {"code": "http_error", "detail": response.text[:500]}
        retry_after = retry_after_s(response.headers.get("retry-after"))
        raise KpdError(response.status_code, problem, retry_after)
    return None if response.status_code == 204 else response.json()


# The backoff hook alone decides when to stop (it knows each call's deadline).
_RETRYING = stamina.RetryingCaller(attempts=None, timeout=None)
_ASYNC_RETRYING = stamina.AsyncRetryingCaller(attempts=None, timeout=None)


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def _messages(data: dict[str, Any]) -> list[PoppedMessage]:
    return [PoppedMessage.from_json(m) for m in data["messages"]]


class _Client:
    """What the sync and async clients share: settings, and the retry policy of one call."""

    _http_class: type[httpx.Client] | type[httpx.AsyncClient]

    def __init__(
        self,
        base_url: str | Sequence[str],
        token: str | None = None,
        timeout_s: float = 60,
        retry_deadline_s: float = RETRY_DEADLINE_S,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
    ) -> None:
        """`base_url`: one sidecar, or several: calls then go to each in turn (any sidecar
        answers any call, so pops spread over them), skipping one that cannot be reached
        (refused, or no connect within `connect_timeout_s`) or gives no answer, and asking it
        last for a while (`kpd_client.sidecars`).
        `timeout_s`: how long a sidecar may take to answer, beyond the wait a call asks of it.
        `retry_deadline_s`: how long a call keeps retrying while leadership moves (0: never)."""
        self._sidecars = Sidecars([base_url] if isinstance(base_url, str) else base_url)
        self._timeout_s = timeout_s
        self._connect_timeout_s = min(timeout_s, connect_timeout_s)
        self._http: Any = self._http_class(
            headers=_headers(token),
            timeout=httpx.Timeout(timeout_s, connect=self._connect_timeout_s),
            limits=CONNECTION_LIMITS,
        )
        self._retry_deadline_s = retry_deadline_s

    def _request(self, url: str, call: Call) -> dict[str, Any]:
        """The arguments of `call` to the sidecar at `url`: its answer may take its wait more."""
        timeout = httpx.Timeout(call.wait_s + self._timeout_s, connect=self._connect_timeout_s)
        return dict(method=call.method, url=url + call.path, json=call.body, timeout=timeout)

    def _goes_on(self, url: str, call: Call, error: Exception) -> bool:
        """The sidecar at `url` is away; may `call`, failed there with `error`, go to another?"""
        self._sidecars.away(url)
        return isinstance(error, UNREACHABLE) or call.resend

    def _deadline(self) -> float:
        return time.monotonic() + self._retry_deadline_s


class KpdClient(_Client):
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
                return _checked(self._http.request(**self._request(url, call)))
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
        self,
        group: str,
        receipts: Iterable[str],
        delay_ms: int | None = None,
    ) -> list[dict[str, Any]]:
        return self._settle(group, "nack", receipts, delay_ms=delay_ms)

    def extend(
        self,
        group: str,
        receipts: Iterable[str],
        invisible_ms: int,
    ) -> list[dict[str, Any]]:
        return self._settle(group, "leases", receipts, invisible_ms=invisible_ms)

    def reject(
        self,
        group: str,
        receipts: Iterable[str],
        reason: str | None = None,
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


class AsyncKpdClient(_Client):
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
                return _checked(await self._http.request(**self._request(url, call)))
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
