"""The client kpd forwards calls with (`foundation.peer_http`), against a socket server that
answers as each test tells it: what it sends, how it reads answers, when it reuses a connection,
and what each failure reads as."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import orjson
import pytest

from foundation.peer_http import PeerFailed, PeerHttp, PeerUnreachable

OK = b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{"a": [1]}\n'
# How the server answers a request (its head and body): bytes to write, then whether to close
# the connection; or None to close it without a word.
Reply = Callable[[bytes, bytes], tuple[bytes, bool] | bytes | None]


class Server:
    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []  # (head, body)
        self.url = ""

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length)
                self.requests.append((head, body))
                answer = self.reply(head, body)
                if answer is None:
                    break
                raw, close = answer if isinstance(answer, tuple) else (answer, False)
                writer.write(raw)
                await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def peer(reply: Reply) -> AsyncIterator[Server]:
    server = Server(reply)
    listening = await asyncio.start_server(server.serve, "127.0.0.1", 0)
    server.url = f"http://127.0.0.1:{listening.sockets[0].getsockname()[1]}"
    try:
        yield server
    finally:
        listening.close()


def run(test: Callable[[PeerHttp], object], idle_s: float = 2.0) -> None:
    async def main() -> None:
        client = PeerHttp(idle_s=idle_s, connect_timeout_s=1.0)
        try:
            await test(client)  # type: ignore[misc]
        finally:
            await client.aclose()

    asyncio.run(main())


def test_a_call_sends_its_method_path_headers_and_json_and_reads_the_answer() -> None:
    async def test(client: PeerHttp) -> None:
        async with peer(lambda head, body: OK) as server:
            answer = await client.request(
                "POST", server.url, "/v1/groups/g/ack", json={"receipts": ["r"]},
                headers={"x-kpd-forwarded": "a-0"},
            )  # fmt: skip
            assert (answer.status_code, answer.json()) == (200, {"a": [1]})
            assert answer.headers["content-type"] == "application/json"
            head, body = server.requests[0]
            lines = head.decode().split("\r\n")
            assert lines[0] == "POST /v1/groups/g/ack HTTP/1.1"
            assert f"host: {server.url.removeprefix('http://')}" in lines
            assert "x-kpd-forwarded: a-0" in lines
            assert "content-type: application/json" in lines
            assert orjson.loads(body) == {"receipts": ["r"]}
            got = await client.request("GET", server.url, "/v1/groups/g")
            assert got.status_code == 200
            assert server.requests[1] == (
                f"GET /v1/groups/g HTTP/1.1\r\nhost: {server.url[7:]}\r\n\r\n".encode(),
                b"",
            )

    run(test)


def test_calls_one_after_another_share_one_connection_until_it_idles_too_long() -> None:
    async def test(client: PeerHttp) -> None:
        async with peer(lambda head, body: OK) as server:
            for _ in range(5):
                assert (await client.request("GET", server.url, "/healthz")).status_code == 200
            assert server.connections == 1
            await asyncio.sleep(0.3)  # past the client's idle bound: a fresh connection
            await client.request("GET", server.url, "/healthz")
            assert server.connections == 2

    run(test, idle_s=0.2)


def test_calls_at_once_take_a_connection_each_and_give_them_back() -> None:
    async def test(client: PeerHttp) -> None:
        async with peer(lambda head, body: OK) as server:
            answers = await asyncio.gather(
                *(client.request("GET", server.url, f"/{i}") for i in range(4))
            )
            assert [a.status_code for a in answers] == [200] * 4
            assert server.connections == 4
            await asyncio.gather(*(client.request("GET", server.url, "/") for _ in range(4)))
            assert server.connections == 4  # all four reused

    run(test)


def test_a_pooled_connection_the_loop_finds_closed_at_the_write_fails_only_that_call() -> None:
    """uvloop raises RuntimeError when writing to a connection its peer reset, though its
    `is_closing()` said open (seen when a sidecar was killed): the call fails as PeerFailed,
    which a forward answers as leadership moving, and the next call takes a new connection."""

    def reset(data: bytes) -> None:
        raise RuntimeError("unable to perform operation on <TCPTransport closed=True>")

    async def test(client: PeerHttp) -> None:
        async with peer(lambda head, body: OK) as server:
            await client.request("GET", server.url, "/")
            (_, writer), _ = client._pools[server.url][-1]
            writer.write = reset  # type: ignore[method-assign]
            with pytest.raises(PeerFailed, match="ConnectionResetError"):
                await client.request("GET", server.url, "/")
            assert (await client.request("GET", server.url, "/")).status_code == 200
            assert server.connections == 2

    run(test)


def test_an_answer_that_closes_its_connection_is_not_reused() -> None:
    closing = OK.replace(b"\r\n\r\n", b"\r\nconnection: close\r\n\r\n", 1)

    async def test(client: PeerHttp) -> None:
        async with peer(lambda head, body: closing) as server:
            for _ in range(3):
                assert (await client.request("GET", server.url, "/")).json() == {"a": [1]}
            assert server.connections == 3

    run(test)


@pytest.mark.parametrize(
    ("raw", "close"),
    [
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
            + b'4\r\n{"a"\r\n6\r\n: [1]}\r\n0\r\n\r\n',
            False,
        ),
        (b'HTTP/1.0 200 OK\r\n\r\n{"a": [1]}', True),  # no length: read to the close
    ],
)
def test_chunked_and_read_to_close_bodies_are_read_whole(raw: bytes, close: bool) -> None:
    async def test(client: PeerHttp) -> None:
        async with peer(lambda head, body: (raw, close)) as server:
            for _ in range(2):
                assert (await client.request("GET", server.url, "/")).json() == {"a": [1]}
            assert server.connections == (2 if close else 1)

    run(test)


def _then_close(raw: bytes) -> Reply:
    return lambda head, body: (raw, True)


def test_nothing_listening_is_unreachable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"

    async def test(client: PeerHttp) -> None:
        with pytest.raises(PeerUnreachable):
            await client.request("GET", url, "/healthz")

    run(test)


def test_no_answer_in_time_fails_the_call_and_its_connection_is_not_reused() -> None:
    async def test(client: PeerHttp) -> None:
        answers = iter([b"", OK])  # the first request gets nothing (the server writes b"")

        async with peer(lambda head, body: next(answers)) as server:
            started = time.monotonic()
            with pytest.raises(PeerFailed) as failed:
                await client.request("GET", server.url, "/slow", timeout_s=0.2)
            assert not isinstance(failed.value, PeerUnreachable)
            assert 0.2 <= time.monotonic() - started < 1.0
            assert (await client.request("GET", server.url, "/")).status_code == 200
            assert server.connections == 2

    run(test)


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/1.1 two hundred\r\ncontent-length: 0\r\n\r\n",
        b"garbage\r\n\r\n",
        b'HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\n{"short": 1}',
        b"HTTP/1.1 200 OK\r\n" + b"x: y\r\n" * 20_000,
    ],
)
def test_a_garbled_or_cut_answer_fails_the_call(raw: bytes) -> None:
    async def test(client: PeerHttp) -> None:
        async with peer(_then_close(raw)) as server:
            with pytest.raises(PeerFailed):
                await client.request("GET", server.url, "/", timeout_s=2)

    run(test)


def test_a_call_cancelled_midway_leaves_no_connection_behind() -> None:
    async def test(client: PeerHttp) -> None:
        answers = iter([b"", OK])

        async with peer(lambda head, body: next(answers)) as server:
            call = asyncio.ensure_future(client.request("GET", server.url, "/watch"))
            await asyncio.sleep(0.1)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            assert (await client.request("GET", server.url, "/")).status_code == 200
            assert server.connections == 2  # the cancelled call's connection went

    run(test)


def test_a_line_break_in_a_header_is_refused_before_anything_is_sent() -> None:
    async def test(client: PeerHttp) -> None:
        async with peer(lambda head, body: OK) as server:
            with pytest.raises(ValueError, match="line break"):
                await client.request("GET", server.url, "/", headers={"x": "a\r\nx-evil: 1"})
            assert server.connections == 0

    run(test)
