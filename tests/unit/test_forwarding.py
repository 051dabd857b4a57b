"""A forwarded call to an owner that is slow, or mute (`cluster.routing.forwarding.send`): a slow
owner's answer is waited for, however long; a mute one (a paused process, a host cut off behind an
open connection: it takes the call and answers nothing) is given up once the call is overdue and the
owner's /healthz does not answer either. The owner is a stand-in (`peer_fakes`); the real thing, a
paused sidecar, is in `tests/integration/test_early_takeover.py`."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest
from peer_fakes import Asked, FakePeers, answer

from cluster.routing import forwarding
from cluster.routing.settle_router import _answered
from foundation.config import Settings
from foundation.peer_http import Answer, PeerFailed
from foundation.problem import Problem

OWNER = "http://owner:9000"


def forwarded(call_takes_s: float, healthy: bool) -> tuple[Answer | Problem, list, list]:
    """Forward an ack to an owner that answers it after `call_takes_s` and answers /healthz if
    `healthy`: (the answer or the problem raised, the paths asked, the addresses reported)."""
    asked: list[str] = []
    told: list[str] = []

    async def owner(request: Asked) -> Answer | Exception:
        asked.append(request.path)
        if request.path == "/healthz":
            return answer(200, {"status": "ok"}) if healthy else PeerFailed("no answer")
        await asyncio.sleep(call_takes_s)
        return answer(200, {"results": []})

    async def send() -> Answer | Problem:
        node: Any = SimpleNamespace(settings=Settings(node_id="a-0"), http=FakePeers(owner),
                                    unreachable=told.append)  # fmt: skip
        try:
            return await forwarding.send(node, "POST", OWNER, "/v1/groups/g/ack", {})
        except Problem as problem:
            return problem

    return asyncio.run(send()), asked, told


@pytest.fixture(autouse=True)
def short_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forwarding, "OVERDUE_S", 0.1)


def test_a_slow_owner_that_answers_its_health_probes_is_waited_for() -> None:
    answered, asked, told = forwarded(call_takes_s=0.45, healthy=True)
    assert isinstance(answered, Answer) and answered.status_code == 200
    assert asked[0] == "/v1/groups/g/ack" and set(asked[1:]) == {"/healthz"}
    assert 3 <= len(asked) <= 5  # probed once per OVERDUE_S while the call was overdue
    assert told == []


def test_a_mute_owner_is_given_up_and_reported() -> None:
    started = time.monotonic()
    answered, asked, told = forwarded(call_takes_s=3600, healthy=False)
    assert time.monotonic() - started < 5
    assert isinstance(answered, Problem)
    assert (answered.status, answered.code) == (503, "leader_unreachable")
    assert asked == ["/v1/groups/g/ack", "/healthz"]
    assert told == [OWNER]


def test_a_quick_answer_asks_no_health_probe() -> None:
    answered, asked, told = forwarded(call_takes_s=0.0, healthy=False)
    assert isinstance(answered, Answer) and answered.status_code == 200
    assert (asked, told) == (["/v1/groups/g/ack"], [])


def owner_answers(given: Answer) -> Any:
    """`forward` an ack to an owner that answers `given`: its JSON, or the problem raised."""

    async def call() -> Any:
        peers = FakePeers(lambda _: given)
        node: Any = SimpleNamespace(
            settings=Settings(node_id="a-0"), http=peers, unreachable=lambda url: None
        )
        try:
            return await forwarding.forward(node, "ack", OWNER, "/v1/groups/g/ack", {})
        except Problem as problem:
            return problem

    return asyncio.run(call())


@pytest.mark.parametrize(
    ("given", "status", "code"),
    [
        (answer(500, text="Internal Server Error"), 500, "forward_failed"),
        (answer(200, text="<html>a proxy's page</html>"), 502, "forward_failed"),
        (answer(200, ["not", "an", "object"]), 502, "forward_failed"),
        (answer(503, {"code": "no_leader", "detail": "moving"}), 503, "no_leader"),
        (answer(422, {"code": "invalid_request", "detail": "x"}), 422, "invalid_request"),
    ],
)
def test_an_owner_s_failure_is_raised_as_a_problem_whatever_its_body(
    given: Answer, status: int, code: str
) -> None:
    problem = owner_answers(given)
    assert isinstance(problem, Problem)
    assert (problem.status, problem.code) == (status, code)
    assert OWNER in problem.detail


def test_an_owner_s_answer_is_its_json() -> None:
    assert owner_answers(answer(200, {"results": [1]})) == {"results": [1]}


async def failing(status: int) -> list[dict[str, Any]]:
    raise Problem(status, "some_code", "detail")


@pytest.mark.parametrize("status", [503, 502, 500])
def test_a_shard_s_server_error_fails_its_items_alone(status: int) -> None:
    problem = asyncio.run(_answered(failing(status)))
    assert isinstance(problem, Problem) and problem.status == status


def test_a_shard_s_4xx_fails_the_whole_settle_call() -> None:
    with pytest.raises(Problem, match="detail"):
        asyncio.run(_answered(failing(422)))


def test_an_answer_that_comes_during_a_failing_probe_is_taken() -> None:
    """The call is answered while the probe sent for it is still on its way (and then fails):
    the answer is the call's, and the owner is not reported."""
    told: list[str] = []

    async def owner(request: Asked) -> Answer | Exception:
        if request.path == "/healthz":
            await asyncio.sleep(0.5)
            return PeerFailed("no answer")
        await asyncio.sleep(0.15)  # overdue at 0.1 s, answered 0.05 s into the probe
        return answer(200, {"results": []})

    async def send() -> Answer:
        node: Any = SimpleNamespace(settings=Settings(node_id="a-0"), http=FakePeers(owner),
                                    unreachable=told.append)  # fmt: skip
        return await forwarding.send(node, "POST", OWNER, "/v1/groups/g/ack", {})

    started = time.monotonic()
    answered = asyncio.run(send())
    assert answered.status_code == 200
    assert time.monotonic() - started < 0.4  # not held for the probe
    assert told == []
