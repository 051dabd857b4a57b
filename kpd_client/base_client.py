"""What the sync and async clients share: how a call reaches the sidecars.

Each call goes to the sidecars in turn (`kpd_client.sidecars`) over pooled connections, with a
connect timeout of its own; one that cannot be reached, or gives no answer to a call safe to send
twice, is skipped for the next. An error answer is raised as `KpdError` (`kpd_client.retry`
says when to try again).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import httpx

from kpd_client.calls import Call
from kpd_client.retry import RETRY_DEADLINE_S, KpdError, retry_after_s
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


def checked_answer(response: httpx.Response) -> Any:
    """The answer's JSON (None for 204); an error answer raised as `KpdError`."""
    if response.status_code >= 400:
        try:
            problem = response.json()
        except ValueError:
            problem = {"code": "http_error", "detail": response.text[:500]}
        retry_after = retry_after_s(response.headers.get("retry-after"))
        raise KpdError(response.status_code, problem, retry_after)
    return None if response.status_code == 204 else response.json()


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


class BaseClient:
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
        self._timeout_s = timeout_s
        self._connect_timeout_s = min(timeout_s, connect_timeout_s)
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        self._sidecars = Sidecars(urls)
        self._http: Any = self._http_class(
            headers=_headers(token),
            timeout=httpx.Timeout(timeout_s, connect=self._connect_timeout_s),
            limits=CONNECTION_LIMITS,
            # Sidecars on plain HTTP need no TLS context, which httpx builds for every client
            # otherwise (loading the CA bundle: some 25 ms of CPU); any https one gets the default.
            verify=any(url.lower().startswith("https:") for url in urls),
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
