"""How the shard owners are asked for (`cluster.owners`): requests with a timeout librdkafka never
reaches (one that timed out inside it aborted the process once the coordinator returned,
librdkafka #4605), a request pending too long asked again on a fresh client (requests also stayed
pending in a client with the broker back), the newest answer counting, and the view's age and how
long it has shown no shard led, for /readyz. The outage test (`tests/integration/test_outages.py`)
shows the requests against a real broker."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, cast

import pytest

from cluster import owners as owners_module
from cluster.membership import Member
from cluster.owners import (
    ABSENT_AFTER_S,
    DESCRIBE_TIMEOUT_S,
    LEADERLESS_AFTER_S,
    MAX_CLIENTS,
    REASK_AFTER_S,
    REFUSED_FOR_S,
    STALE_AFTER_S,
    Owners,
    group_reasons,
)
from foundation.metrics import LEADERLESS, OWNERS_VIEW_AGE
from sidecar.self_heal import CLIENT_REASONS

A = Member("id-a", "http://a", frozenset({0, 2}))
B = Member("id-b", "http://b", frozenset({1}))


class AskedMembership:
    """Stands in for the group: hands out the requests' futures for the test to answer. This
    worker is the member at http://a, in the group for `joined` seconds."""

    def __init__(self) -> None:
        self.asked: list[tuple[Future[Any], object, float]] = []  # future, client, timeout
        self.url = "http://a"
        self.assigned_once = True
        self.joined = 60.0
        self.session_timeout_s = 2.0

    def joined_s(self) -> float:
        return self.joined

    def describe(self, admin: object, request_timeout_s: float) -> Future[Any]:
        future: Future[Any] = Future()
        self.asked.append((future, admin, request_timeout_s))
        return future

    def members(self, description: tuple[list[Member], bool]) -> list[Member]:
        return description[0]

    def stable(self, description: tuple[list[Member], bool]) -> bool:
        return description[1]

    def answer(self, i: int, members: list[Member], stable: bool = True) -> None:
        self.asked[i][0].set_result((members, stable))

    def clients(self) -> list[object]:
        return [admin for _, admin, _ in self.asked]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    monkeypatch.setattr(owners_module, "REFRESH_S", 0.01)  # a round's wait for answers
    return Clock()


def owners_of(membership: AskedMembership, clock: Clock) -> Owners:
    # Each client a new object; ticked by the test.
    return Owners(cast(Any, membership), object, clock)


def test_a_pending_request_is_waited_for_then_asked_anew_on_the_same_client(clock: Clock) -> None:
    membership = AskedMembership()
    owners = owners_of(membership, clock)
    owners.tick()
    clock.now += REASK_AFTER_S - 0.5
    owners.tick()  # Kafka away a moment: the request is still pending
    assert [timeout for _, _, timeout in membership.asked] == [DESCRIBE_TIMEOUT_S]
    assert DESCRIBE_TIMEOUT_S >= 3600  # beyond any outage a round waits out
    assert owners.by_shard == {}

    membership.answer(0, [A])  # Kafka is back: the same request is answered
    owners.tick()  # reads it, and asks anew on the same client
    assert owners.by_shard == {0: "http://a", 2: "http://a"}
    assert owners.ring.members == (A,)
    assert len(membership.asked) == 2
    assert membership.clients()[1] is membership.clients()[0]


def test_a_failed_request_keeps_the_view_and_is_asked_again(clock: Clock) -> None:
    membership = AskedMembership()
    owners = owners_of(membership, clock)
    owners.tick()
    membership.answer(0, [B])
    owners.tick()  # asks anew, reads the answer
    membership.asked[1][0].set_exception(RuntimeError("coordinator not available"))
    owners.tick()  # asks again, reads the failure
    assert owners.by_shard == {1: "http://b"}
    assert len(membership.asked) == 3
    assert len(set(map(id, membership.clients()))) == 1


def test_a_request_pending_too_long_is_asked_again_on_a_fresh_client(clock: Clock) -> None:
    membership = AskedMembership()
    owners = owners_of(membership, clock)
    owners.tick()
    clock.now += REASK_AFTER_S
    owners.tick()  # stuck in its client, maybe: asked beside it on a new one
    assert len(membership.asked) == 2
    assert membership.clients()[1] is not membership.clients()[0]

    membership.answer(1, [B])
    owners.tick()
    assert owners.by_shard == {1: "http://b"}
    membership.answer(0, [A])  # the older request answers late: its view is older
    owners.tick()
    assert owners.by_shard == {1: "http://b"}


def test_clients_with_requests_pending_are_bounded(clock: Clock) -> None:
    membership = AskedMembership()
    owners = owners_of(membership, clock)
    for _ in range(MAX_CLIENTS + 3):  # a long outage: nothing answers
        owners.tick()
        clock.now += REASK_AFTER_S
    assert len(membership.asked) == MAX_CLIENTS
    assert len(set(map(id, membership.clients()))) == MAX_CLIENTS

    membership.answer(0, [A])  # the oldest client's request is answered: room for one more
    owners.tick()
    assert owners.by_shard == {0: "http://a", 2: "http://a"}
    assert len(membership.asked) == MAX_CLIENTS + 1


def test_the_view_age_counts_from_start_then_from_each_answer(clock: Clock) -> None:
    membership = AskedMembership()
    owners = owners_of(membership, clock)
    owners.tick()
    clock.now += 7
    assert owners.stale_s() == 7  # no view yet: as old as the worker
    membership.answer(0, [A])
    owners.tick()
    assert owners.stale_s() == 0
    clock.now += 12
    owners.tick()  # the request asked then is not answered
    assert owners.stale_s() == 12
    assert OWNERS_VIEW_AGE._value.get() == 12  # what /metrics shows


def test_views_with_no_shard_led_count_until_one_shows_a_leader(clock: Clock) -> None:
    membership = AskedMembership()
    owners = owners_of(membership, clock)
    owners.tick()
    clock.now += 5
    assert owners.leaderless_s() == 5  # no view yet: since the start
    membership.answer(0, [A])
    owners.tick()
    assert owners.leaderless_s() == 0
    clock.now += 3
    rebalancing = [Member("id-a", "http://a", frozenset()), Member("id-b", "http://b", frozenset())]
    membership.answer(1, rebalancing)
    owners.tick()
    assert owners.by_shard == {}
    assert owners.leaderless_s() == 3  # since the view that last showed a leader
    clock.now += LEADERLESS_AFTER_S - 2
    owners.tick()  # the request asked then is not answered: the view in use still shows none
    assert owners.leaderless_s() == LEADERLESS_AFTER_S + 1
    assert LEADERLESS._value.get() == LEADERLESS_AFTER_S + 1  # what /metrics shows
    membership.answer(2, [B])
    owners.tick()
    assert owners.leaderless_s() == 0


def test_a_member_is_settled_once_every_shard_is_led_and_the_view_shows_what_it_holds(
    clock: Clock,
) -> None:
    """What a worker waits for before it counts as started (`Sidecar._waiting_workers`)."""
    membership = AskedMembership()
    owners = owners_of(membership, clock)
    owners.tick()
    assert not owners.settled("http://b", frozenset(), 3)  # no view yet
    clock.now += 1  # a view counts if asked after the one in use
    membership.answer(0, [Member("id-a", "http://a", frozenset({0, 1, 2}))])
    owners.tick()
    assert owners.settled("http://a", frozenset({0, 1, 2}), 3)
    assert not owners.settled("http://b", frozenset(), 3)  # b is not in the group yet
    # b joined: while the rebalance prepares, the group shows what a and b held before it.
    preparing = [
        Member("id-a", "http://a", frozenset({0, 1, 2})),
        Member("id-b", "http://b", frozenset()),
    ]
    clock.now += 1
    membership.answer(1, preparing, stable=False)
    owners.tick()
    assert not owners.settled("http://b", frozenset(), 3)
    # The cooperative rebalance's first round takes shard 1 from a, gives b nothing.
    first_round = [
        Member("id-a", "http://a", frozenset({0, 2})),
        Member("id-b", "http://b", frozenset()),
    ]
    clock.now += 1
    membership.answer(2, first_round)
    owners.tick()
    assert not owners.settled("http://b", frozenset(), 3)
    clock.now += 1
    membership.answer(3, [Member("id-a", "http://a", frozenset({0, 2})), B])
    owners.tick()
    assert not owners.settled("http://b", frozenset(), 3)  # not taken here yet
    assert owners.settled("http://b", frozenset({1}), 3)
    assert not owners.settled("http://b", frozenset({1}), 4)  # a shard nobody leads


def test_a_worker_fresh_views_leave_out_is_not_in_the_group_and_restarts(clock: Clock) -> None:
    """After a paused broker came back, a worker's group client never rejoined, and the worker
    said only "no shard has had a leader", which self-heal does not act on (CI, stop 43)."""
    membership = AskedMembership()
    owners = owners_of(membership, clock)
    owners.tick()
    membership.answer(0, [A, B])
    owners.tick()
    assert owners.absent_s() == 0
    assert group_reasons(cast(Any, membership), owners) == []
    for i in range(1, 12):  # fresh views, every second, without this worker or still rebalancing
        clock.now += 1
        membership.answer(i, [B] if i % 2 else [A, B], stable=bool(i % 2))
        owners.tick()
    assert owners.absent_s() == 11
    reasons = group_reasons(cast(Any, membership), owners)
    assert reasons == ["not in the group for 11 s"]
    assert ABSENT_AFTER_S < 11
    assert [r for r in reasons if r.startswith(CLIENT_REASONS)] == reasons  # self-heal acts

    membership.joined = 3.0  # it rejoined a moment ago: a join takes a rebalance
    assert group_reasons(cast(Any, membership), owners) == []
    membership.joined = 0.0  # out of the group on purpose (its clock too far off)
    assert group_reasons(cast(Any, membership), owners) == []

    membership.joined = 60.0
    clock.now += STALE_AFTER_S + 1  # Kafka away: no view says who is in the group
    assert group_reasons(cast(Any, membership), owners) == ["shard leaders not known for 11 s"]

    membership.answer(12, [A, B])  # listed again
    owners.tick()
    assert group_reasons(cast(Any, membership), owners) == []


def test_a_joining_worker_may_wait_two_sessions_to_be_listed(clock: Clock) -> None:
    """Its rebalance waits for a dead member's session to end: with 30 s sessions it was
    restarted before it could be listed."""
    membership = AskedMembership()
    membership.session_timeout_s = 30.0
    membership.joined = 600.0
    owners = owners_of(membership, clock)
    owners.tick()
    for i in range(59):
        clock.now += 1
        membership.answer(i, [B])
        owners.tick()
    assert owners.absent_s() == 59
    assert group_reasons(cast(Any, membership), owners) == []
    clock.now += 2
    membership.answer(59, [B])
    owners.tick()
    assert group_reasons(cast(Any, membership), owners) == ["not in the group for 61 s"]


def test_before_setup_or_the_first_assignment_shard_leaders_are_not_known_yet(
    clock: Clock,
) -> None:
    assert group_reasons(None, None) == ["shard leaders not known yet"]
    membership = AskedMembership()
    membership.assigned_once = False
    owners = owners_of(membership, clock)
    owners.tick()
    membership.answer(0, [A, B])
    owners.tick()
    assert group_reasons(cast(Any, membership), owners) == ["shard leaders not known yet"]


def test_calls_for_a_member_that_refused_one_go_to_its_guardian_for_a_while(clock: Clock) -> None:
    """Three members of one shard each: a killed owner stays named by the group until its session
    ends, while its guardian has taken its shards over early. Once a call to it is refused, calls
    for its shards go to the guardian; after `REFUSED_FOR_S` it is asked again."""
    membership = AskedMembership()
    owners = owners_of(membership, clock)
    a, b, c = (Member(f"id-{n}", f"http://{n}", frozenset({i})) for i, n in enumerate("abc"))
    owners.tick()
    membership.answer(0, [a, b, c])
    owners.tick()
    view = {0: "http://a", 1: "http://b", 2: "http://c"}
    assert owners.routes() == owners.by_shard == view
    guardian_of_b = owners.ring.guardians_by_url()["http://b"]
    assert guardian_of_b == "http://c"  # the next member after b in ring order (by member id)
    owners.refused("http://b")
    assert owners.routes() == {**view, 1: guardian_of_b}
    assert owners.by_shard == view  # the group's view itself: what stats go by
    clock.now += REFUSED_FOR_S - 0.1
    assert owners.routes()[1] == guardian_of_b
    clock.now += 0.2
    assert owners.routes() == view  # asked again: a refusal would mark it again


def test_a_refused_guardian_takes_nothing_over() -> None:
    """Two members that both refused (a whole deployment restarting): their shards stay where the
    group names them, never sent to an address known to refuse."""
    owners = Owners(cast(Any, AskedMembership()), object)
    a, b = Member("id-a", "http://a", frozenset({0})), Member("id-b", "http://b", frozenset({1}))
    owners._show([a, b], True, 0.0)
    owners.refused("http://a")
    owners.refused("http://b")
    assert owners.routes() == {0: "http://a", 1: "http://b"}
    owners.refused("http://x")  # not a member
    assert owners.routes() == {0: "http://a", 1: "http://b"}
