"""A watched member's health, asked over its link (`cluster.links.Links.health`).

The member here is a socket server that answers each request as a test tells it to; the real
member, a `kpd run` worker, is probed so in the early-takeover integration tests.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from cluster.links import HEALTH_REQUEST, Links, Probe

OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 15\r\n\r\n" + (
    b'{"status":"ok"}'
)
UNAVAILABLE = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n"

# How the member answers the n-th request of a connection: bytes to send (in pieces), or None to
# close the connection, or ... to say nothing.
Answer = Callable[[int], list[bytes] | None]


@contextmanager
def member(answer: Answer) -> Iterator[tuple[str, list[int]]]:
    """A member at a URL, and the number of requests each connection it accepted carried."""
    server = socket.create_server(("127.0.0.1", 0))
    connections: list[int] = []
    stop = threading.Event()

    def serve(conn: socket.socket, index: int) -> None:
        with conn:
            buffered = b""
            while not stop.is_set():
                try:
                    chunk = conn.recv(4096)
                except OSError:
                    return
                if not chunk:
                    return
                buffered += chunk
                while HEALTH_REQUEST in buffered:
                    buffered = buffered.replace(HEALTH_REQUEST, b"", 1)
                    connections[index] += 1
                    pieces = answer(connections[index])
                    if pieces is None:
                        return
                    for piece in pieces:
                        conn.sendall(piece)

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            connections.append(0)
            threading.Thread(target=serve, args=(conn, len(connections) - 1), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}", connections
    finally:
        stop.set()
        server.close()


@contextmanager
def links(timeout_s: float = 0.5) -> Iterator[Links]:
    held = Links(timeout_s)
    try:
        yield held
    finally:
        held.close()


def test_a_healthy_member_answers_every_probe_over_one_connection() -> None:
    with member(lambda _: [OK]) as (url, connections), links() as held:
        assert [held.health(url) for _ in range(5)] == [Probe.ANSWERED] * 5
        assert connections == [5]
        assert held.holds(url)
        assert held.wait(0.05) == set()  # the answers were read whole: the link is quiet


def test_an_answer_in_pieces_is_read_whole() -> None:
    pieces = [OK[:10], OK[10:60], OK[60:]]
    with member(lambda _: pieces) as (url, connections), links() as held:
        assert held.health(url) is Probe.ANSWERED
        assert held.health(url) is Probe.ANSWERED
        assert connections == [2]


def test_another_status_is_silence() -> None:
    with member(lambda _: [UNAVAILABLE]) as (url, _), links() as held:
        assert held.health(url) is Probe.SILENT


def test_no_answer_is_silence_within_the_timeout_and_the_link_is_dropped() -> None:
    with member(lambda _: []) as (url, _), links(timeout_s=0.3) as held:
        started = time.monotonic()
        assert held.health(url) is Probe.SILENT
        assert 0.3 <= time.monotonic() - started < 1.5
        assert not held.holds(url)


def test_a_link_the_member_closed_is_opened_again_once() -> None:
    """The member closes every connection after its first answer (as its keep-alive bound
    does): each probe finds the old link closed and asks over a new one."""
    with member(lambda n: [OK] if n == 1 else None) as (url, connections), links() as held:
        assert held.health(url) is Probe.ANSWERED
        assert held.health(url) is Probe.ANSWERED
        assert held.health(url) is Probe.ANSWERED
        assert connections == [2, 2, 1]


def test_a_member_that_closes_every_connection_unanswered_is_silent() -> None:
    with member(lambda _: None) as (url, connections), links() as held:
        assert held.health(url) is Probe.SILENT
        assert connections == [1, 1]


def test_nothing_listening_is_refused() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    with links() as held:
        assert held.health(url) is Probe.REFUSED


def test_a_garbled_or_oversized_answer_is_silence() -> None:
    garbled = [b"HTTP/1.1 two hundred\r\ncontent-length: 0\r\n\r\n"]
    endless_head = [b"HTTP/1.1 200 OK\r\n" + b"x: y\r\n" * 20_000]
    huge_body = [b"HTTP/1.1 200 OK\r\ncontent-length: 100000000\r\n\r\n"]
    two_answers = [OK + OK]
    for answer in (garbled, endless_head, huge_body, two_answers):
        with member(lambda _, a=answer: a) as (url, _), links() as held:
            assert held.health(url) is Probe.SILENT, answer[0][:40]
            assert not held.holds(url)
