"""The HTTP server against hostile and slow clients: a real `kpd run` over real sockets.

The token is checked before any body is read, so anonymous uploads cost no memory; slow heads
and bodies are cut off within their configured bounds while other clients keep being served.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import httpx
import orjson
import pytest
from confluent_kafka import Producer
from kafka_helpers import wait_for

TOKEN = "t0ken-for-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PROBLEM = "application/problem+json"


def _unauthorized(response: httpx.Response) -> None:
    assert response.status_code == 401, response.text
    assert response.headers["content-type"] == PROBLEM
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.json()["code"] == "unauthorized"


def test_token_is_checked_exactly_and_before_the_body(sidecar_factory, new_topic, kafka_bootstrap):
    sidecar = sidecar_factory("a", api_token=TOKEN).start()
    topic, group = new_topic(), "guards"
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topic, b"only")
    assert producer.flush(30) == 0
    with sidecar.client() as http:
        for path in ("/healthz", "/readyz", "/metrics", "/openapi.json"):
            assert http.get(path).status_code == 200, path  # open to probes and scrapers
        pop = f"/v1/groups/{group}/topics/{topic}/pop"

        def popped() -> list:
            answer = http.post(pop, json={"wait_ms": 1000, "invisible_ms": 60_000}, headers=AUTH)
            return answer.json()["messages"]

        [message] = wait_for(popped, 30, "the message popped")
        ack = {"receipts": [message["receipt"]]}
        refused: list[dict[str, str | bytes]] = [
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": TOKEN},
            {"Authorization": f"Basic {TOKEN}"},
            {"Authorization": f"Bearer {TOKEN}".encode() + b"\xc2\xa0"},  # U+00A0
            {"Authorization": f"Bearer {TOKEN}".encode() + b"\xc2\x85"},  # U+0085
            {"Authorization": f"Bearer {TOKEN}x"},
        ]
        for headers in refused:
            _unauthorized(http.post(f"/v1/groups/{group}/ack", json=ack, headers=headers))
            # A malformed body is never read: still 401, not 422.
            garbage = {**headers, "content-type": "application/json"}
            _unauthorized(http.post(f"/v1/groups/{group}/ack", content=b"{not", headers=garbage))
        _unauthorized(http.get(f"/v1/groups/{group}"))
        _unauthorized(http.get("/v1/no-such-path"))  # unknown paths do not tell they are unknown
        # None of the refused calls acked the message: the right token acks it now.
        results = http.post(f"/v1/groups/{group}/ack", json=ack, headers=AUTH).json()["results"]
        assert [r["status"] for r in results] == ["acked"]
        lower = {"Authorization": f"bearer   {TOKEN}"}
        assert http.get(f"/v1/groups/{group}", headers=lower).status_code == 200


async def _anonymous_upload(port: int, size: int) -> bytes:
    """POST `size` bytes with a wrong token; the status line of the answer (b"" if cut off)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /v1/groups/g/ack HTTP/1.1\r\nHost: kpd\r\nAuthorization: Bearer wrong\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % size
    )
    chunk = b"x" * (1 << 20)
    try:
        for sent in range(0, size, len(chunk)):
            writer.write(chunk[: size - sent])
            await writer.drain()
        return await reader.readline()
    except ConnectionError:
        return b""
    finally:
        writer.close()


def test_anonymous_uploads_do_not_grow_memory(sidecar_factory):
    """Issue 8: 40 clients sending 15 MB each raised RSS by about 600 MB before the fix."""
    sidecar = sidecar_factory("a", api_token=TOKEN).start()
    with sidecar.client() as http:
        assert http.get("/v1/groups/g", headers=AUTH).status_code == 200  # warm
    baseline = sidecar.rss_mb()
    peak = baseline
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.02):
            peak = max(peak, sidecar.rss_mb())

    sampler = threading.Thread(target=sample)
    sampler.start()

    async def uploads() -> list[bytes]:
        return await asyncio.gather(
            *(_anonymous_upload(sidecar.port, 15_000_000) for _ in range(40))
        )

    try:
        answers = asyncio.run(uploads())
    finally:
        done.set()
        sampler.join()
    after = sidecar.rss_mb()
    print(f"RSS baseline {baseline:.0f} MB, peak {peak:.0f} MB, after {after:.0f} MB")
    assert set(answers) == {b"HTTP/1.1 401 Unauthorized\r\n"}
    assert peak - baseline < 60, (baseline, peak)
    assert after - baseline < 30, (baseline, after)
    with sidecar.client() as http:
        assert http.get("/v1/groups/g", headers=AUTH).status_code == 200


class RawClient:
    """A socket that sends what a test says, when it says, and reads what comes back."""

    def __init__(self, port: int) -> None:
        self.opened = time.monotonic()
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)

    def send(self, data: bytes) -> bool:
        """False once the server has closed the connection."""
        try:
            self.sock.sendall(data)
            return True
        except OSError:
            return False

    def answer_until_closed(self) -> tuple[bytes, float]:
        """Everything the server sends until it closes, and when it closed (s since open)."""
        received = b""
        try:
            while chunk := self.sock.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass
        return received, time.monotonic() - self.opened

    def close(self) -> None:
        self.sock.close()


def _problem_in(raw: bytes, status: int, code: str) -> None:
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d " % status), raw[:200]
    assert b"content-type: application/problem+json" in head.lower()
    assert orjson.loads(body)["code"] == code


def _trickle(client: RawClient, parts: list[bytes], every_s: float) -> None:
    for part in parts:
        if not client.send(part):
            return
        time.sleep(every_s)  # the slowness under test, not a wait for a condition


SLOW = {
    "http_header_timeout_ms": "1000",
    "http_body_timeout_ms": "1500",
    "http_keep_alive_ms": "1000",
    "http_max_header_bytes": "4096",
}


@pytest.fixture(scope="module")
def guarded(module_sidecar_factory):
    """One sidecar for the module's tests of slow and idle connections."""
    return module_sidecar_factory("a", **SLOW).start()


def test_slow_heads_are_cut_off_and_others_are_served(guarded):
    head = b"GET /healthz HTTP/1.1\r\nHost: kpd\r\n"
    slow = [RawClient(guarded.port) for _ in range(20)]
    idle = RawClient(guarded.port)  # connects and never sends a byte
    senders = [
        threading.Thread(target=_trickle, args=(c, [head] + [b"X-Slow: 1\r\n"] * 40, 0.1))
        for c in slow
    ]
    for sender in senders:
        sender.start()
    with guarded.client() as http:  # served at once while the slow ones hang on
        started = time.monotonic()
        assert http.get("/healthz").status_code == 200
        assert time.monotonic() - started < 0.5
    for client in [*slow, idle]:
        raw, closed_after = client.answer_until_closed()
        _problem_in(raw, 408, "request_timeout")
        assert 0.9 <= closed_after < 2.5, closed_after
        client.close()
    for sender in senders:
        sender.join()


def test_a_head_over_the_size_limit_is_431(guarded):
    client = RawClient(guarded.port)
    client.send(b"GET /healthz HTTP/1.1\r\nHost: kpd\r\nX-Big: " + b"a" * 8000)
    raw, closed_after = client.answer_until_closed()
    _problem_in(raw, 431, "header_too_large")
    assert closed_after < 0.9  # refused for its size, not its time
    client.close()
    with httpx.Client(base_url=guarded.url) as http:
        big = http.get("/healthz", headers={"X-Fine": "a" * 3000})
        assert big.status_code == 200  # under the limit


def test_a_slow_body_is_cut_off_with_408(guarded, new_topic):
    topic = new_topic()
    client = RawClient(guarded.port)
    body = orjson.dumps({"messages": [{"value": "v" * 50}]})
    client.send(
        b"POST /v1/topics/%s/messages HTTP/1.1\r\nHost: kpd\r\nContent-Type: application/json"
        b"\r\nContent-Length: %d\r\n\r\n" % (topic.encode(), len(body))
    )
    sender = threading.Thread(
        target=_trickle, args=(client, [body[i : i + 5] for i in range(0, len(body), 5)], 0.2)
    )
    sender.start()
    raw, closed_after = client.answer_until_closed()
    sender.join()
    _problem_in(raw, 408, "request_timeout")
    assert 1.4 <= closed_after < 3.0, closed_after
    client.close()
    with guarded.client() as http:  # the same body sent at once is served
        answer = http.post(
            f"/v1/topics/{topic}/messages",
            content=body,
            headers={"content-type": "application/json"},
        )
        assert answer.json()["results"][0]["status"] == "enqueued"


def test_idle_keep_alive_connections_are_closed(guarded):
    client = RawClient(guarded.port)
    client.send(b"GET /healthz HTTP/1.1\r\nHost: kpd\r\n\r\n")
    raw, closed_after = client.answer_until_closed()
    assert raw.startswith(b"HTTP/1.1 200 ")
    assert 0.9 <= closed_after < 2.5, closed_after
    client.close()
