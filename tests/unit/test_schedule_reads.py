"""A schedule read or cancel that misses this worker's index: a follower asks the shard's owner,
whose index may already have a schedule written a moment ago (the owner is a stand-in,
`peer_fakes`; real sidecars: `tests/integration/test_shards.py`)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from peer_fakes import Asked, FakePeers, answer
from starlette.requests import Request

from api.schedules import cancel_schedule, get_schedule
from cluster.routing.forwarding import FORWARDED
from delay_service.schedules import Freshness
from foundation.config import Settings
from foundation.problem import Problem
from foundation.shards import ShardMap

ME, OWNER = "http://me:9000", "http://owner:9000"
FOUND = {"id": "x", "state": "scheduled", "target": "t", "deliver_at_ms": 1}


def call(route: Any, owner: str, forwarded: bool = False) -> tuple[Any, list[Asked]]:
    """`route` for id "x" on a worker whose index follows every shard and has no schedule, with
    `owner` as the shard's owner; (its answer or the Problem raised, the calls it made)."""
    peers = FakePeers(
        lambda asked: answer(204, text="") if asked.method == "DELETE" else answer(200, FOUND)
    )

    async def run() -> Any:
        node: Any = SimpleNamespace(
            settings=Settings(node_id="b-0"), http=peers, unreachable=lambda _: None,
            shard_map=ShardMap(2, 2), url=ME, routes=lambda: {0: owner, 1: owner},
            freshness=lambda _: Freshness.CURRENT,
            schedules=SimpleNamespace(find=lambda _: None),
        )  # fmt: skip
        headers = [(FORWARDED.encode(), b"a-0")] if forwarded else []
        request = Request({"type": "http", "method": "GET", "path": "/", "headers": headers})
        try:
            return await route("x", request, node)
        except Problem as problem:
            return problem

    return asyncio.run(run()), peers.asked


@pytest.mark.parametrize(("route", "status"), [(get_schedule, 200), (cancel_schedule, 204)])
def test_a_followers_miss_is_answered_by_the_shards_owner(route: Any, status: int) -> None:
    answered, seen = call(route, OWNER)
    assert answered.status_code == status
    (request,) = seen
    assert (request.url, request.path) == (OWNER, "/v1/schedules/x")
    assert request.headers[FORWARDED] == "b-0"


@pytest.mark.parametrize("route", [get_schedule, cancel_schedule])
def test_the_owners_miss_or_a_forwarded_calls_is_not_found(route: Any) -> None:
    for answered, seen in (call(route, ME), call(route, OWNER, forwarded=True)):
        assert isinstance(answered, Problem)
        assert (answered.status, answered.code, seen) == (404, "schedule_not_found", [])
