"""A schedule sent on to the owner of its shard: what is sent, and what comes of each answer a
peer might give (the peer is a stand-in, `peer_fakes`; the whole path runs against real sidecars
in `tests/integration/test_shards.py`)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from peer_fakes import Asked, FakePeers, answer

from api.messages import MessageIn, ProduceResult, _send_to
from foundation.config import Settings
from foundation.peer_http import Answer, PeerFailed, PeerUnreachable

OWNER = "http://owner:9000"


def send(
    given: Answer | Exception, token: str | None = None, refused: list | None = None
) -> tuple[list | None, list[Asked]]:
    """Forward two schedules to a peer that answers `given`; (results, requests seen). The
    addresses the node is told refused a call go to `refused`."""
    told = [] if refused is None else refused
    peers = FakePeers(lambda _: given)

    async def forward() -> list[ProduceResult] | None:
        node: Any = SimpleNamespace(
            settings=Settings(node_id="a-0", api_token=token), http=peers, unreachable=told.append
        )
        messages = [
            (MessageIn(value="v", delay_ms=5_000, headers={"h": "1"}), 1_000_005_000, "x-1"),
            (MessageIn(value_b64="AAE=", deliver_at_ms=2_000_000_000), 2_000_000_000, "x.2"),
        ]
        return await _send_to(node, "orders", OWNER, messages)

    return asyncio.run(forward()), peers.asked


def test_the_owner_gets_due_times_and_ids_as_a_forwarded_call() -> None:
    results = [{"status": "scheduled", "id": "x-1", "deliver_at_ms": 1}] * 2
    answered, seen = send(answer(200, {"results": results}), token="s3cret")
    assert answered is not None
    assert [r.model_dump(exclude_none=True) for r in answered] == results
    (request,) = seen
    assert (request.method, request.url, request.path) == (
        "POST", OWNER, "/v1/topics/orders/messages"
    )  # fmt: skip
    assert request.headers["x-kpd-forwarded"] == "a-0"
    assert request.headers["authorization"] == "Bearer s3cret"
    assert request.json == {
        "messages": [
            {"value": "v", "headers": {"h": "1"}, "deliver_at_ms": 1_000_005_000, "id": "x-1"},
            {"value_b64": "AAE=", "deliver_at_ms": 2_000_000_000, "id": "x.2"},
        ]
    }


@pytest.mark.parametrize(
    "away",
    [PeerUnreachable("refused"), PeerUnreachable("no connect in time"), PeerFailed("slow")],
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
    assert refused == ([] if not isinstance(away, PeerUnreachable) else [OWNER])
    # The answer may take what the owner may wait on purpose (its index, then the schedule's
    # write: 5 s each) and 25 s more; a connect waits 2 s at most (`PeerHttp`).
    assert seen[0].timeout_s == 35.0


@pytest.mark.parametrize(
    ("given", "code", "detail"),
    [
        (answer(503, {"code": "no_leader", "detail": "moving"}), "no_leader", "moving"),
        (answer(502, text="<html>bad gateway</html>"), "produce_failed", "bad gateway"),
        (answer(200, {"results": [{"status": "scheduled"}]}), "produce_failed", ""),
        (answer(200, {"results": [{"status": "lost"}] * 2}), "produce_failed", ""),
        (answer(200, ["not", "an", "object"]), "produce_failed", ""),
        (answer(200, text="{truncated"), "produce_failed", "truncated"),
    ],
)
def test_an_owner_that_fails_fails_only_the_schedules_sent_to_it(
    given: Answer | Exception, code: str, detail: str
) -> None:
    answered, _ = send(given)
    assert answered is not None
    assert [(r.status, r.code) for r in answered] == [("error", code)] * 2
    assert all(r.detail is not None and detail in r.detail and OWNER in r.detail for r in answered)
