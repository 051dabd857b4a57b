"""A schedule sent on to the owner of its shard: what is sent, and what comes of each answer a
peer might give (the peer is an `httpx.MockTransport`; the whole path runs against real sidecars
in `tests/integration/test_shards.py`)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from api.messages import MessageIn, ProduceResult, _send_to
from foundation.config import Settings

OWNER = "http://owner:9000"


def send(
    answer: httpx.Response | Exception, token: str | None = None, refused: list | None = None
) -> tuple[list | None, list]:
    """Forward two schedules to a peer that answers `answer`; (results, requests seen). The
    addresses the node is told refused a call go to `refused`."""
    seen: list[httpx.Request] = []
    told = [] if refused is None else refused

    def peer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def forward() -> list[ProduceResult] | None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(peer)) as http:
            node: Any = SimpleNamespace(
                settings=Settings(node_id="a-0", api_token=token), http=http,
                unreachable=told.append,
            )  # fmt: skip
            messages = [
                (MessageIn(value="v", delay_ms=5_000, headers={"h": "1"}), 1_000_005_000, "x-1"),
                (MessageIn(value_b64="AAE=", deliver_at_ms=2_000_000_000), 2_000_000_000, "x.2"),
            ]
            return await _send_to(node, "orders", OWNER, messages)

    return asyncio.run(forward()), seen


def test_the_owner_gets_due_times_and_ids_as_a_forwarded_call() -> None:
    results = [{"status": "scheduled", "id": "x-1", "deliver_at_ms": 1}] * 2
    answered, seen = send(httpx.Response(200, json={"results": results}), token="s3cret")
    assert answered is not None
    assert [r.model_dump(exclude_none=True) for r in answered] == results
    (request,) = seen
    assert (request.method, str(request.url)) == ("POST", f"{OWNER}/v1/topics/orders/messages")
    assert request.headers["x-kpd-forwarded"] == "a-0"
    assert request.headers["authorization"] == "Bearer s3cret"
    assert json.loads(request.content) == {
        "messages": [
            {"value": "v", "headers": {"h": "1"}, "deliver_at_ms": 1_000_005_000, "id": "x-1"},
            {"value_b64": "AAE=", "deliver_at_ms": 2_000_000_000, "id": "x.2"},
        ]
    }


@pytest.mark.parametrize(
    "away",
    [httpx.ConnectError("refused"), httpx.ConnectTimeout("silent"), httpx.ReadTimeout("slow")],
)
def test_an_owner_that_cannot_be_reached_leaves_the_schedules_to_the_caller(
    away: Exception,
) -> None:
    refused: list[str] = []
    answered, seen = send(away, refused=refused)
    assert (answered, len(seen)) == (None, 1)
    # Refused, or no connect: nothing answers there, and the node routes the owner's shards to
    # its watcher for a while. An owner that outlasted the bound answered its health probes (a
    # mute one is given up sooner, `tests/unit/test_forwarding.py`): alive, it keeps them.
    assert refused == ([] if isinstance(away, httpx.ReadTimeout) else [OWNER])
    # A connect waits 2 s at most (a gone host never answers it); the answer, what the owner
    # may wait on purpose (its index, then the schedule's write: 5 s each) and 25 s more.
    assert seen[0].extensions["timeout"] == {"connect": 2.0, "read": 35.0, "write": 35.0,
                                             "pool": 35.0}  # fmt: skip


@pytest.mark.parametrize(
    ("answer", "code", "detail"),
    [
        (
            httpx.Response(503, json={"code": "no_leader", "detail": "moving"}),
            "no_leader",
            "moving",
        ),
        (httpx.Response(502, text="<html>bad gateway</html>"), "produce_failed", "bad gateway"),
        (httpx.Response(200, json={"results": [{"status": "scheduled"}]}), "produce_failed", ""),
        (httpx.Response(200, json={"results": [{"status": "lost"}] * 2}), "produce_failed", ""),
        (httpx.Response(200, json=["not", "an", "object"]), "produce_failed", ""),
        (httpx.Response(200, text="{truncated"), "produce_failed", "truncated"),
    ],
)
def test_an_owner_that_fails_fails_only_the_schedules_sent_to_it(
    answer: httpx.Response | Exception, code: str, detail: str
) -> None:
    answered, _ = send(answer)
    assert answered is not None
    assert [(r.status, r.code) for r in answered] == [("error", code)] * 2
    assert all(r.detail is not None and detail in r.detail and OWNER in r.detail for r in answered)
