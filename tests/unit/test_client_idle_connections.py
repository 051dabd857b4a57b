"""The SDK stops reusing an idle connection before a sidecar's keep-alive would close it.

httpx reuses idle connections for 5 s by default, exactly a sidecar's default keep-alive
(`KPD_HTTP_KEEP_ALIVE_MS`). A call sent just as the sidecar closes the connection fails with
"Server disconnected without sending a response". A small local HTTP server stands in for the
sidecar here: what is tested is the client's connection pool, not kpd.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from typing import ClassVar

import pytest
from json_stub import JsonHandler, serve

from foundation.config import Settings
from kpd_client import KpdClient
from kpd_client.base_client import IDLE_CONNECTION_S
from kpd_client.client import AsyncKpdClient


class _Sidecar(JsonHandler):
    """Answers a group's stats (GET) and an empty pop (POST)."""

    protocol_version = "HTTP/1.1"  # keep-alive, as uvicorn
    peers: ClassVar[list[int]] = []  # the client port of each request: one per connection used

    def do_GET(self) -> None:
        self._answer(b'{"group": "g", "topics": {}}')

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self._answer(b'{"messages": []}')

    def _answer(self, body: bytes) -> None:
        self.peers.append(self.client_address[1])
        self.answer(body)


@pytest.fixture
def server() -> Iterator[str]:
    _Sidecar.peers = []
    for address in serve(ThreadingHTTPServer(("127.0.0.1", 0), _Sidecar)):
        yield f"http://{address}"


def test_the_idle_expiry_is_below_the_sidecars_default_keep_alive() -> None:
    keep_alive_s = Settings.model_fields["http_keep_alive_ms"].default / 1000
    assert keep_alive_s / 2 > IDLE_CONNECTION_S  # room for a slow answer and a slow clock


def test_a_connection_idle_longer_than_the_expiry_is_not_reused(server: str) -> None:
    with KpdClient(server) as kpd:
        kpd.group("g")
        kpd.group("g")  # right away: the same connection
        time.sleep(IDLE_CONNECTION_S + 0.3)  # the idle time is what is tested
        kpd.group("g")
    first, again, after_idle = _Sidecar.peers
    assert again == first
    assert after_idle != first


def test_the_async_client_has_the_same_expiry(server: str) -> None:
    async def calls() -> None:
        async with AsyncKpdClient(server) as kpd:
            assert await kpd.pop("g", "t") == []
            await kpd.pop("g", "t")
            await asyncio.sleep(IDLE_CONNECTION_S + 0.3)
            await kpd.pop("g", "t")

    asyncio.run(calls())
    first, again, after_idle = _Sidecar.peers
    assert again == first
    assert after_idle != first
