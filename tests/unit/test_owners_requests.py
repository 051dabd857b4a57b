"""How the shard owners are asked for (`sidecar.owners`): one member-list request at a time, with
a timeout librdkafka never reaches, waited for a bounded time per round. A request that timed out
inside librdkafka would abort the process once the coordinator returns (librdkafka #4605); the
outage test (`tests/integration/test_outages.py`) shows it against a real broker."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, cast

from sidecar.membership import Member
from sidecar.owners import DESCRIBE_TIMEOUT_S, Owners

ROUND_WAIT_S = 0.01  # how long a round waits for the answer (the worker's Kafka timeout)


class AskedMembership:
    """Stands in for the group: hands out the requests' futures for the test to answer."""

    def __init__(self) -> None:
        self.asked: list[tuple[Future[Any], float]] = []

    def describe(self, _admin: Any, request_timeout_s: float) -> Future[Any]:
        future: Future[Any] = Future()
        self.asked.append((future, request_timeout_s))
        return future

    def members(self, description: list[Member]) -> list[Member]:
        return description


def owners_of(membership: AskedMembership) -> Owners:
    return Owners(cast(Any, membership), cast(Any, None), ROUND_WAIT_S)  # ticked by the test


def test_a_pending_request_is_waited_for_not_asked_again() -> None:
    membership = AskedMembership()
    owners = owners_of(membership)
    owners.tick()
    owners.tick()  # Kafka away: the first request is still pending
    assert [timeout for _, timeout in membership.asked] == [DESCRIBE_TIMEOUT_S]
    assert DESCRIBE_TIMEOUT_S >= 3600  # beyond any outage a round waits out
    assert owners.by_shard == {}

    member = Member("id-a", "http://a", frozenset({0, 2}))
    membership.asked[0][0].set_result([member])  # Kafka is back: the same request is answered
    owners.tick()
    assert owners.by_shard == {0: "http://a", 2: "http://a"}
    assert owners.members == [member]
    assert len(membership.asked) == 1

    owners.tick()  # answered: the next round asks anew
    assert len(membership.asked) == 2


def test_a_failed_request_keeps_the_last_answer_and_is_asked_again() -> None:
    membership = AskedMembership()
    owners = owners_of(membership)
    owners.tick()
    membership.asked[0][0].set_result([Member("id-a", "http://a", frozenset({1}))])
    owners.tick()  # reads the answer
    owners.tick()  # asks anew; no answer within the round
    membership.asked[1][0].set_exception(RuntimeError("coordinator not available"))
    owners.tick()  # reads the failure
    assert owners.by_shard == {1: "http://a"}
    assert len(membership.asked) == 2
    owners.tick()  # failed: asked again
    assert len(membership.asked) == 3
