"""An open TCP connection to each member a worker watches (`sidecar.successor`).

The kernel closes a process's sockets the moment it dies, however it dies, so a link to a
killed member becomes readable at once, and a blocking `select` over the links learns of the
death with no probing meanwhile. A link closed for another reason (the member's head timeout
closes a connection that sends no request, `api.slow_clients`) is simply opened again.
"""

from __future__ import annotations

import enum
import os
import select
import socket
from collections.abc import Iterable

import httpx


class Probe(enum.Enum):
    ANSWERED = "answered"
    LISTENING = "listening"  # a TCP connect was accepted: no news of its health
    REFUSED = "refused"  # nothing listens at the address
    SILENT = "silent"  # timed out, or answered other than healthy


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
        address = httpx.URL(url)
        try:
            link = socket.create_connection((address.host, address.port or 80), self._timeout_s)
        except TimeoutError:
            return Probe.SILENT
        except OSError:  # refused, or no route: as httpx's ConnectError
            return Probe.REFUSED
        self._links[url] = link
        return Probe.LISTENING

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
