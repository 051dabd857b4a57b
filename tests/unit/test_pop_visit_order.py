"""Which sources a pop asks first: this worker's shards, and the other owners often enough that
no lane starves (`cluster.routing.pop_turns`)."""

from __future__ import annotations

from collections import Counter

import pytest

from cluster.routing.pop_turns import (
    CLIENTS_POP_HERE,
    CLIENTS_SEEN_S,
    REMOTE_FIRST_EVERY,
    PopTurns,
    visit_order,
)

LOCAL = ["shard-0", "shard-3"]


@pytest.mark.parametrize("remote", [[], ["http://b"], ["http://b", "http://c"], ["b", "c", "d"]])
def test_every_pop_asks_every_source_once(remote: list[str]) -> None:
    for turn in range(10 * REMOTE_FIRST_EVERY):
        assert sorted(visit_order(LOCAL, remote, turn)) == sorted(LOCAL + remote)


@pytest.mark.parametrize("remote", [["http://b"], ["http://b", "http://c"], ["b", "c", "d"]])
def test_local_shards_come_first_except_one_turn_in_every_few(remote: list[str]) -> None:
    turns = len(remote) * REMOTE_FIRST_EVERY * 3
    firsts = [visit_order(LOCAL, remote, turn)[0] for turn in range(turns)]
    remote_first = [turn for turn, first in enumerate(firsts) if first in remote]
    assert len(remote_first) == turns // REMOTE_FIRST_EVERY
    assert all(turn % REMOTE_FIRST_EVERY == REMOTE_FIRST_EVERY - 1 for turn in remote_first)
    # Each other owner goes first equally often, and so does each local shard.
    assert set(Counter(f for f in firsts if f in remote).values()) == {3}
    local_firsts = Counter(f for f in firsts if f in LOCAL)
    assert local_firsts.keys() == set(LOCAL)
    assert abs(local_firsts["shard-0"] - local_firsts["shard-3"]) <= 1


def test_with_no_local_shard_the_owners_take_turns() -> None:
    firsts = [visit_order([], ["b", "c", "d"], turn)[0] for turn in range(30)]
    assert Counter(firsts) == {"b": 10, "c": 10, "d": 10}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _remote_first_turns(turns: PopTurns, clock: Clock, pops: int, step_s: float) -> list[str]:
    """The sources asked first by `pops` pops of ("g", "t"), `step_s` apart."""
    firsts = []
    for _ in range(pops):
        firsts.append(turns.order("g", "t", LOCAL, ["http://b", "http://c"])[0])
        clock.now += step_s
    return [first for first in firsts if first not in LOCAL]


def test_an_owner_whose_clients_pop_there_is_not_asked_first_while_they_come() -> None:
    clock = Clock()
    turns = PopTurns(clock)
    turns.heard("http://b", "g", "t", {"messages": [], CLIENTS_POP_HERE: True})
    # Within CLIENTS_SEEN_S only c, whose clients were not heard of, gets remote-first turns.
    pops = 4 * REMOTE_FIRST_EVERY
    step_s = CLIENTS_SEEN_S / pops / 2
    assert _remote_first_turns(turns, clock, pops, step_s) == ["http://c"] * 4
    turns.heard("http://c", "g", "t", {"messages": [], CLIENTS_POP_HERE: True})
    assert _remote_first_turns(turns, clock, pops, step_s) == []  # b's word is still fresh
    # Once CLIENTS_SEEN_S has passed since an owner's word, its turns come back.
    clock.now += CLIENTS_SEEN_S
    assert _remote_first_turns(turns, clock, pops, step_s) == ["http://b", "http://c"] * 2
    # Another group's or topic's pops were never told.
    assert turns.order("g2", "t", LOCAL, ["http://b"])[0] == "shard-0"


@pytest.mark.parametrize("answer", [{}, {CLIENTS_POP_HERE: False}, {CLIENTS_POP_HERE: "yes"}])
def test_an_owner_that_says_no_or_nothing_gets_its_turns_again(answer: dict) -> None:
    clock = Clock()
    turns = PopTurns(clock)
    turns.heard("http://b", "g", "t", {CLIENTS_POP_HERE: True})
    turns.heard("http://b", "g", "t", answer)
    pops = 2 * REMOTE_FIRST_EVERY
    assert _remote_first_turns(turns, clock, pops, 0.0) == ["http://b", "http://c"]


def test_clients_pop_here_for_clients_seen_s_after_their_last_pop() -> None:
    clock = Clock()
    turns = PopTurns(clock)
    assert not turns.clients_pop_here("g", "t")
    turns.client_pop("g", "t")
    clock.now += CLIENTS_SEEN_S * 0.99
    assert turns.clients_pop_here("g", "t")
    assert not turns.clients_pop_here("g", "other")
    assert not turns.clients_pop_here("other", "t")
    clock.now += CLIENTS_SEEN_S * 0.02
    assert not turns.clients_pop_here("g", "t")


def test_owners_served_by_their_clients_are_asked_last_and_only_on_remote_first_turns() -> None:
    turn = REMOTE_FIRST_EVERY - 1
    assert visit_order(LOCAL, ["b", "c"], turn, served={"b"}) == ["c", *LOCAL, "b"]
    assert visit_order(LOCAL, ["b", "c"], turn, served={"b", "c"}) == [*LOCAL, "b", "c"]
    # On the other turns a served owner is not asked: its own clients drain its lanes.
    assert visit_order(LOCAL, ["b", "c"], turn - 1, served={"b"}) == [*LOCAL, "c"]
    assert visit_order(LOCAL, ["b", "c"], turn - 1, served={"b", "c"}) == LOCAL


def test_an_owner_whose_watch_told_of_records_is_asked_though_its_clients_pop_there() -> None:
    clock = Clock()
    turns = PopTurns(clock)
    owners = ["http://b", "http://c"]
    turns.heard("http://b", "g", "t", {"messages": [], CLIENTS_POP_HERE: True})
    assert turns.order("g", "t", LOCAL, owners) == [*LOCAL, "http://c"]
    told = turns.order("g", "t", LOCAL, owners, told={"http://b"})
    assert sorted(told[:2]) == LOCAL and sorted(told[2:]) == owners  # turns rotate each list
