"""HTTP/1.1 calls between kpd's own processes: a call forwarded to a shard's owner, its health.

At 100 messages a second over two workers, about one call in two is forwarded to the other
worker (a pop, a watch, an ack); a general client (httpx: its pool, anyio, h11) made some 2,500
Python calls per call, as many as the rest of the message. The peers are kpd's own servers, so
this client speaks only what they answer: a status line, headers, a body of `content-length`
bytes (chunked and read-to-close bodies are read too). A connection carries one call at a time
and goes back to its peer's pool after a whole answer; one idle for `idle_s` (below the peers'
keep-alive, so never reused just as the peer closes it) or interrupted is closed.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson

Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]
MAX_HEAD_BYTES = 65_536


class PeerFailed(Exception):
    """The peer gave no whole answer: it timed out, closed the connection, or answered garbage."""


class PeerUnreachable(PeerFailed):
    """Nothing answered the connect: refused, or no answer within the connect timeout."""


@dataclass(frozen=True)
class Answer:
    status_code: int
    headers: dict[str, str]  # names in lower case
    content: bytes

    def json(self) -> Any:
        """The body as JSON; `ValueError` if it is not."""
        return orjson.loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode(errors="replace")


class PeerHttp:
    def __init__(self, idle_s: float, connect_timeout_s: float) -> None:
        self._idle_s, self._connect_timeout_s = idle_s, connect_timeout_s
        self._pools: dict[str, list[tuple[Connection, float]]] = {}  # by base URL, newest last
        self._addresses: dict[str, tuple[str, int]] = {}

    async def request(
        self,
        method: str,
        url: str,
        path: str,
        json: Any = None,
        headers: dict[str, str] | None = None,
        timeout_s: float = 30.0,
    ) -> Answer:
        """`method path` at the peer at `url` (scheme, host, port), with `json` as its body:
        the whole answer within `timeout_s`; `PeerUnreachable` or `PeerFailed` otherwise."""
        body = b"" if json is None else orjson.dumps(json)
        head = _head(method, path, url, headers or {}, None if json is None else len(body))
        connection = await self._connection(url)
        try:
            async with asyncio.timeout(timeout_s):
                reader, writer = connection
                _write(writer, head + body)
                await writer.drain()
                answer, reusable = await _answer(reader)
        except (OSError, EOFError, ValueError, TimeoutError, asyncio.LimitOverrunError) as error:
            connection[1].close()
            raise PeerFailed(f"{method} {url}{path}: {error!r}") from None
        except BaseException:  # cancelled mid-call: the connection's state is unknown
            connection[1].close()
            raise
        if reusable:
            self._pools.setdefault(url, []).append((connection, time.monotonic()))
        else:
            connection[1].close()
        return answer

    async def aclose(self) -> None:
        for pool in self._pools.values():
            for (_, writer), _ in pool:
                writer.close()
        self._pools.clear()

    async def _connection(self, url: str) -> Connection:
        """The newest idle connection to `url` still fresh and open, else a new one."""
        pool = self._pools.get(url, [])
        now = time.monotonic()
        while pool:
            (reader, writer), since = pool.pop()
            if now - since < self._idle_s and not reader.at_eof() and not writer.is_closing():
                return reader, writer
            writer.close()
        host, port = self._address(url)
        try:
            return await asyncio.wait_for(
                asyncio.open_connection(host, port, limit=MAX_HEAD_BYTES), self._connect_timeout_s
            )
        except (OSError, TimeoutError) as error:
            raise PeerUnreachable(f"connect to {url}: {error!r}") from None

    def _address(self, url: str) -> tuple[str, int]:
        address = self._addresses.get(url)
        if address is None:
            parts = urlsplit(url)
            address = self._addresses[url] = (parts.hostname or "", parts.port or 80)
        return address


def _write(writer: asyncio.StreamWriter, data: bytes) -> None:
    """uvloop raises RuntimeError for a write on a connection its peer has reset, even where
    `is_closing()` said it was open: that is a connection lost, as for any other loop."""
    try:
        writer.write(data)
    except RuntimeError as error:
        raise ConnectionResetError(str(error)) from None


def _head(method: str, path: str, url: str, headers: dict[str, str], length: int | None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"host: {urlsplit(url).netloc}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if length is not None:
        lines += ["content-type: application/json", f"content-length: {length}"]
    if any("\r" in line or "\n" in line for line in lines):
        raise ValueError("a line break in a request's head")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def _answer(reader: asyncio.StreamReader) -> tuple[Answer, bool]:
    """One whole answer, and whether its connection may carry another call."""
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, *lines = head[:-4].decode("latin-1").split("\r\n")
    version, status = status_line.split(" ", 2)[:2]
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    close = headers.get("connection", "").lower() == "close" or version != "HTTP/1.1"
    if "content-length" in headers:
        content = await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        content = await _chunked(reader)
    else:
        content, close = await reader.read(), True
    return Answer(int(status), headers, content), not close


async def _chunked(reader: asyncio.StreamReader) -> bytes:
    chunks = []
    while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
        chunks.append(await reader.readexactly(size))
        await reader.readexactly(2)
    while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers, if any, up to the blank line
        pass
    return b"".join(chunks)
