"""A stand-in for `node.http` (`foundation.peer_http.PeerHttp`) in unit tests of what kpd does
with a peer's answers: each call is recorded and answered by a handler. The client itself is
tested against real sockets (`tests/unit/test_peer_http.py`), the whole path against real
sidecars (`tests/integration/test_shards.py`)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from foundation.peer_http import Answer


@dataclass(frozen=True)
class Asked:
    method: str
    url: str
    path: str
    headers: dict[str, str]
    json: Any
    timeout_s: float


def answer(status: int, json: Any = None, text: str | None = None) -> Answer:
    """A peer's answer with a JSON body, or a text one."""
    body = text.encode() if text is not None else orjson.dumps(json)
    kind = "text/plain" if text is not None else "application/json"
    return Answer(status, {"content-type": kind, "content-length": str(len(body))}, body)


class FakePeers:
    """Answers each call with `handler(asked)`: an `Answer`, or an exception it raises (awaited
    first, if the handler is a coroutine function)."""

    def __init__(self, handler: Callable[[Asked], Any]) -> None:
        self._handler = handler
        self.asked: list[Asked] = []

    async def request(
        self,
        method: str,
        url: str,
        path: str,
        json: Any = None,
        headers: dict[str, str] | None = None,
        timeout_s: float = 30.0,
    ) -> Answer:
        asked = Asked(method, url, path, dict(headers or {}), json, timeout_s)
        self.asked.append(asked)
        result = self._handler(asked)
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, BaseException):
            raise result
        return result  # type: ignore[no-any-return]
