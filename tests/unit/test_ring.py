"""The ring of members: whom each one watches and keeps a standby of (`Owners.predecessor`)."""

from __future__ import annotations

from typing import Any, cast

from sidecar.membership import Member
from sidecar.owners import Owners


def ring(*members: Member) -> Owners:
    owners = Owners(cast(Any, None), cast(Any, None))  # never started: no Kafka here
    owners.members = sorted(members, key=lambda m: m.member_id)
    return owners


def test_each_member_watches_the_one_before_it_and_the_first_the_last() -> None:
    a, b, c = (Member(f"id-{n}", f"http://{n}", frozenset({i})) for i, n in enumerate("abc"))
    owners = ring(c, a, b)  # listed in any order: the ring is ordered by member id
    assert [owners.predecessor(m.url) for m in (a, b, c)] == [c, a, b]


def test_no_predecessor_alone_or_when_not_a_member() -> None:
    a = Member("id-a", "http://a", frozenset({0, 1}))
    assert ring(a).predecessor("http://a") is None
    assert ring(a, Member("id-b", "http://b", frozenset())).predecessor("http://c") is None
    assert ring().predecessor("http://a") is None
