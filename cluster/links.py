"""An open TCP connection to each member a worker watches (`cluster.successor`).

The kernel closes a process's sockets the moment it dies, however it dies, so a link to a
killed member becomes readable at once, and a blocking `select` over the links learns of the
death with no probing meanwhile. A link closed for another reason (the member's head timeout
closes a connection that sends no request, `api.slow_clients`) is simply opened again.

The member's health is asked over its link too, as one HTTP/1.1 keep-alive request (`health`):
a few socket calls, where an HTTP client library made some 1,600 Python calls per probe.
"""

from __future__ import annotations

import enum
import os
import select
import socket
import time
from collections.abc import Iterable
from urllib.parse import urlsplit


class Probe(enum.Enum):
    ANSWERED = "answered"
    LISTENING = "listening"  # a TCP connect was accepted: no news of its health
    REFUSED = "refused"  # nothing listens at the address
    SILENT = "silent"  # timed out, or answered other than healthy


HEALTH_REQUEST = b"GET /healthz HTTP/1.1\r\nHost: kpd\r\n\r\n"
MAX_ANSWER_BYTES = 65_536  # a health answer is some 200 bytes: past this, not a kpd member


class Closed(Exception):
    """The member closed the link before a whole answer came."""


class Links:
    def __init__(self, timeout_s: float) -> None:
        self._timeout_s = timeout_s
        self._links: dict[str, socket.socket] = {}
        self._wake_r, self._wake_w = os.pipe()  # ends a `wait` (a stop)

    def holds(self, url: str) -> bool:
        return url in self._links

    def connect(self, url: str) -> Probe:
        """(Re)open the link to `url`: REFUSED, SILENT (no answer to the connect) or LISTENING
        (the link is held from now on)."""
        self.drop(url)
        address = urlsplit(url)
        try:
            link = socket.create_connection((address.hostname, address.port or 80), self._timeout_s)
        except TimeoutError:
            return Probe.SILENT
        except OSError:  # refused, or no route
            return Probe.REFUSED
        self._links[url] = link
        return Probe.LISTENING

    def health(self, url: str) -> Probe:
        """Ask `url`'s /healthz over its link (opened first if missing): ANSWERED for a 200,
        SILENT for no whole answer in time or anything else, REFUSED if nothing listens. A link
        the member closed since (its keep-alive bound) is opened again, once."""
        for _ in range(2):
            if url not in self._links and (probe := self.connect(url)) is not Probe.LISTENING:
                return probe
            try:
                self._links[url].sendall(HEALTH_REQUEST)
                status = _answer_status(self._links[url], time.monotonic() + self._timeout_s)
            except (Closed, ConnectionError):
                self.drop(url)
                continue
            except (OSError, ValueError):  # a timeout, a garbled answer: the link is spent
                self.drop(url)
                return Probe.SILENT
            return Probe.ANSWERED if status == 200 else Probe.SILENT
        return Probe.SILENT

    def keep(self, urls: Iterable[str]) -> None:
        """Close the links to members no longer watched."""
        wanted = set(urls)
        for url in [url for url in self._links if url not in wanted]:
            self.drop(url)

    def wait(self, seconds: float) -> set[str]:
        """Block up to `seconds`, or until links close (or speak); those links, dropped."""
        by_fd = {link.fileno(): url for url, link in self._links.items()}
        ready, _, _ = select.select([*by_fd, self._wake_r], [], [], seconds)
        if self._wake_r in ready:
            os.read(self._wake_r, 4096)
        closed = {by_fd[fd] for fd in ready if fd in by_fd}
        for url in closed:
            self.drop(url)
        return closed

    def wake(self) -> None:
        os.write(self._wake_w, b"x")

    def drop(self, url: str) -> None:
        link = self._links.pop(url, None)
        if link is not None:
            link.close()

    def close(self) -> None:
        for url in list(self._links):
            self.drop(url)
        os.close(self._wake_r)
        os.close(self._wake_w)


def _answer_status(link: socket.socket, deadline: float) -> int:
    """Read one HTTP/1.1 answer whole (its head, then `content-length` bytes): its status.
    `Closed` if the link ends first, `TimeoutError` past `deadline`, `ValueError` if it is not
    one answer of a kpd member."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += _recv(link, deadline)
        if len(received) > MAX_ANSWER_BYTES:
            raise ValueError("an answer's head too long")
    head, body = received.split(b"\r\n\r\n", 1)
    status_line, *headers = head.split(b"\r\n")
    length = 0
    for line in headers:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    if length > MAX_ANSWER_BYTES:
        raise ValueError("an answer's body too long")
    while len(body) < length:
        body += _recv(link, deadline)
    if len(body) > length:
        raise ValueError("more than one answer to one request")
    return int(status_line.split(b" ")[1])


def _recv(link: socket.socket, deadline: float) -> bytes:
    link.settimeout(max(deadline - time.monotonic(), 0.001))
    chunk = link.recv(MAX_ANSWER_BYTES)
    if not chunk:
        raise Closed
    return chunk
