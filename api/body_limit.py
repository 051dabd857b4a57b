"""Read each request body up front, bounded in size (413) and in time (408).

FastAPI's own `max_body_size` answers `text/plain`; every kpd error is RFC 9457 problem JSON
with a stable `code`, hence this small middleware. It reads the body (at most the limit, so memory
stays bounded) before calling the app: a streamed (chunked) body that turns out too large is then
answered 413 too, instead of surfacing as a body-parsing error inside the app. The whole body must
arrive within the body timeout, so a client trickling bytes cannot hold a connection for long.
It runs after the bearer-token check (`api.auth`): only authorised callers get a body read.
"""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.problems import problem_response


class _TooLarge(Exception):
    pass


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float) -> None:
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._too_large(scope, receive, send)
            return
        try:
            async with asyncio.timeout(self.timeout_s):  # no extra task per request
                body = await self._read(receive)
        except _TooLarge:
            await self._too_large(scope, receive, send)
            return
        except TimeoutError:
            response = problem_response(
                408,
                "request_timeout",
                f"the request body did not arrive within {self.timeout_s:g} s",
                headers={"Connection": "close"},  # the rest of a trickled body is not wanted
            )
            await response(scope, receive, send)
            return
        if body is None:  # the client went away
            return
        await self.app(scope, replaying(body, receive), send)

    async def _read(self, receive: Receive) -> bytes | None:
        return await read_body(receive, self.max_bytes)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = problem_response(
            413, "request_too_large", f"request body exceeds {self.max_bytes} bytes",
            max_bytes=self.max_bytes,
        )  # fmt: skip
        await response(scope, receive, send)


async def read_body(receive: Receive, max_bytes: int | None = None) -> bytes | None:
    """The whole body (None: the client went away); `_TooLarge` past `max_bytes`."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if max_bytes is not None and size > max_bytes:
            raise _TooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def replaying(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands the app `body`, already read, then waits as `receive` does."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()  # after the body: wait for a disconnect, as usual
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
