"""Cut off clients that are slow to send a request head, or send one that is too large.

uvicorn bounds the idle time between requests (`timeout_keep_alive`) but not the time a client
takes to send a request line and headers, nor (with httptools) their size: a client trickling
header bytes (slowloris) would hold its connection, and memory, for as long as it likes. This
protocol starts a timer when a connection opens and when each request begins, stops it when the
head is complete, and counts head bytes meanwhile; over either bound the client gets a 408 or 431
problem and the connection is closed. Bodies are bounded by `api.body_limit` (time and size).

It also renews the Date header uvicorn sends, when a request begins in a new second: uvicorn's
server renews it on a tick of its own, which kpd's server does not run (`sidecar.run`), so an
idle worker does not wake.
"""

from __future__ import annotations

import asyncio
import time
from email.utils import formatdate
from http import HTTPStatus
from typing import ClassVar

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from api.problems import PROBLEM_JSON, problem_body
from foundation.problem import ProblemCode


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    head_timeout_s: float = 10.0  # set per server by `guarded_protocol`
    max_head_bytes: int = 65_536

    _head_timer: asyncio.TimerHandle | None = None
    _head_bytes = 0
    _date_second: ClassVar[int] = -1  # of the Date header its server sends now (one class each)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._start_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._end_head()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        # Only bytes of chunks that began inside a head are counted: a head that starts in the
        # middle of a chunk (after a pipelined body) is counted from the next chunk on, which
        # still bounds it (by the limit plus one read).
        if self._head_timer is not None:
            self._head_bytes += len(data)
        super().data_received(data)
        if self._head_timer is not None and self._head_bytes > self.max_head_bytes:
            self._refuse(
                431, "header_too_large", f"the request head exceeds {self.max_head_bytes} bytes"
            )

    def on_message_begin(self) -> None:
        self._renew_date()
        super().on_message_begin()
        if self._head_timer is None:
            self._start_head()

    def on_headers_complete(self) -> None:
        self._end_head()
        super().on_headers_complete()

    def _renew_date(self) -> None:
        """The Date header of the second this request began in (read as its headers complete)."""
        second = int(time.time())
        if second != type(self)._date_second and self.config.date_header:
            type(self)._date_second = second
            date = (b"date", formatdate(second, usegmt=True).encode())
            self.server_state.default_headers = [date, *self.config.encoded_headers]

    def _start_head(self) -> None:
        self._head_bytes = 0
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

    def _end_head(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        self._refuse(
            408,
            "request_timeout",
            f"the request head did not arrive within {self.head_timeout_s:g} s",
        )

    def _refuse(self, status: int, code: ProblemCode, detail: str) -> None:
        self._end_head()
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete:  # no answer is being written
            body = orjson.dumps(problem_body(status, code, detail))
            head = (
                f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
                f"content-type: {PROBLEM_JSON}\r\n"
                f"content-length: {len(body)}\r\n"
                "connection: close\r\n\r\n"
            )
            self.transport.write(head.encode() + body)
        self.transport.close()


def guarded_protocol(head_timeout_s: float, max_head_bytes: int) -> type[HttpToolsProtocol]:
    """The protocol class for uvicorn's `http=` setting, with these bounds."""
    return type(
        "GuardedHttpToolsProtocol",
        (GuardedHttpToolsProtocol,),
        {"head_timeout_s": head_timeout_s, "max_head_bytes": max_head_bytes},
    )
