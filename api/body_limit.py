"""Reject request bodies over the limit with 413 before they are read into memory.

FastAPI's own `max_body_size` answers `text/plain`; every kpd error is RFC 9457 problem JSON
with a stable `code`, hence this small middleware.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.problems import problem_response


class BodyLimit:
    """Checks Content-Length up front and counts streamed (chunked) bodies as they arrive."""

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
        seen = 0
        response_started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            response_started = response_started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            if not response_started:
                await self._too_large(scope, receive, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = problem_response(
            413,
            "request_too_large",
            f"request body exceeds {self.max_bytes} bytes",
            max_bytes=self.max_bytes,
        )
        await response(scope, receive, send)


class _TooLarge(Exception):
    pass
