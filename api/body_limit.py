"""Reject request bodies over the limit with 413 before the app sees them.

FastAPI's own `max_body_size` answers `text/plain`; every kpd error is RFC 9457 problem JSON
with a stable `code`, hence this small middleware. It reads the body (at most the limit, so memory
stays bounded) before calling the app: a streamed (chunked) body that turns out too large is then
answered 413 too, instead of surfacing as a body-parsing error inside the app.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.problems import problem_response


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._too_large(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._too_large(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body: Message = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()  # after the body: wait for a disconnect, as usual
            replayed = True
            return body

        await self.app(scope, replay, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = problem_response(
            413, "request_too_large", f"request body exceeds {self.max_bytes} bytes",
            max_bytes=self.max_bytes,
        )  # fmt: skip
        await response(scope, receive, send)
