"""The lean path (`api.hot_routes`): well-formed pop-group calls are answered without FastAPI;
everything else reaches FastAPI with its body intact."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from api import hot_routes
from api.hot_routes import HotRoutes
from api.pop_calls import Answer
from foundation.problem import Problem


class Inner:
    """Stands in for FastAPI: records the bodies it was handed."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.bodies.append((await receive())["body"])
        await send({"type": "http.response.start", "status": 422, "headers": []})
        await send({"type": "http.response.body", "body": b"fastapi"})


def call(app: HotRoutes, path: str, body: bytes, content_type: bytes = b"application/json"):
    """One POST through `app`: (status, headers, body)."""
    scope = {
        "type": "http", "method": "POST", "path": path, "server": ("127.0.0.1", 8080),
        "headers": [(b"content-type", content_type)],
    }  # fmt: skip
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], dict(sent[0]["headers"]), b"".join(m.get("body", b"") for m in sent)


class Node:
    url = "http://127.0.0.1:8080"

    class settings:
        workers = 1


@pytest.fixture
def calls(monkeypatch) -> list[tuple]:
    made: list[tuple] = []

    async def settle_call(node, kind, group, body, caller) -> Answer:
        made.append((kind, group, body))
        if group == "moving":
            raise Problem(503, "no_leader", "moving", headers={"Retry-After": "1"})
        return Answer(orjson.dumps({"results": [{"receipt": "r", "status": "acked"}]}))

    async def pop_call(node, router, group, topic, body, caller) -> Answer:
        made.append(("pop", group, topic, body))
        return Answer(b'{"messages":[]}', close=True)

    monkeypatch.setattr(hot_routes, "settle_call", settle_call)
    monkeypatch.setattr(hot_routes, "pop_call", pop_call)
    return made


def test_a_well_formed_call_is_answered_without_fastapi(calls) -> None:
    inner = Inner()
    app = HotRoutes(inner, Node(), None)  # type: ignore[arg-type]
    status, headers, body = call(app, "/v1/groups/g/ack", b'{"receipts": ["r"]}')
    assert (status, orjson.loads(body)["results"][0]["status"]) == (200, "acked")
    assert headers[b"content-type"] == b"application/json"
    assert headers[b"content-length"] == str(len(body)).encode()
    [(kind, group, decoded)] = calls
    assert (kind, group, decoded.receipts) == ("ack", "g", ["r"])
    status, headers, _ = call(app, "/v1/groups/g/topics/t/pop", b'{"max_messages": 5}')
    assert (status, headers[b"connection"]) == (200, b"close")
    assert calls[1][:3] == ("pop", "g", "t") and calls[1][3].max_messages == 5
    assert inner.bodies == []


JSON = b"application/json"


@pytest.mark.parametrize(
    ("path", "body", "content_type"),
    [
        ("/v1/groups/g/ack", b'{"receipts": ["r"], "more": 1}', b"application/json"),  # unknown
        ("/v1/groups/g/ack", b'{"receipts": []}', b"application/json"),  # below the bounds
        ("/v1/groups/g/nack", b'{"items": [{"receipt": "r", "delay_ms": true}]}', JSON),
        ("/v1/groups/g/topics/t/pop", b'{"wait_ms": 3050.0}', b"application/json"),  # pydantic's
        ("/v1/groups/g/ack", b"not json", b"application/json"),
        ("/v1/groups/g/ack", b'{"receipts": ["r"]}', b"text/plain"),
        ("/v1/groups/a%20b/ack", b'{"receipts": ["r"]}', b"application/json"),  # no group name
        ("/v1/groups/g/ack/more", b'{"receipts": ["r"]}', b"application/json"),
    ],
)
def test_anything_else_reaches_fastapi_with_its_body(calls, path, body, content_type) -> None:
    inner = Inner()
    app = HotRoutes(inner, Node(), None)  # type: ignore[arg-type]
    assert call(app, path, body, content_type)[2] == b"fastapi"
    assert inner.bodies == [body]
    assert calls == []


def test_a_problem_is_answered_as_problem_json(calls) -> None:
    app = HotRoutes(Inner(), Node(), None)  # type: ignore[arg-type]
    status, headers, body = call(app, "/v1/groups/moving/ack", b'{"receipts": ["r"]}')
    assert (status, headers[b"retry-after"]) == (503, b"1")
    assert headers[b"content-type"] == b"application/problem+json"
    assert orjson.loads(body)["code"] == "no_leader"
