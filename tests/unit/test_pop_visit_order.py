"""Which sources a pop asks first: this worker's shards, and the other owners often enough that
no lane starves (`api.pop_router.visit_order`)."""

from __future__ import annotations

from collections import Counter

import pytest

from api.pop_router import REMOTE_FIRST_EVERY, visit_order

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
