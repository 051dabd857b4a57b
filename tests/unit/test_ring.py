"""The ring of members: whom each one watches and keeps a standby of (`Ring.watched`)."""

from __future__ import annotations

from cluster.membership import Member, client_id, member_of
from cluster.ring import Ring


def ring(*members: Member) -> Ring:
    return Ring.of(list(members))


def worker(sidecar: str, index: int, port: int) -> Member:
    """A worker as the group describes it: its member id starts with its client id."""
    url = f"http://{sidecar}:{port}"
    made = member_of(f"{client_id(url, index, sidecar)}-uuid", client_id(url, index, sidecar),
                     frozenset({port}))  # fmt: skip
    assert made is not None
    return made


def test_each_member_watches_the_one_before_it_and_the_first_the_last() -> None:
    a, b, c = (Member(f"id-{n}", f"http://{n}", frozenset({i})) for i, n in enumerate("abc"))
    owners = ring(c, a, b)  # listed in any order: the ring is ordered by member id
    assert [owners.watched(m.url) for m in (a, b, c)] == [[c], [a], [b]]


def test_nothing_watched_alone_or_when_not_a_member() -> None:
    a = Member("id-a", "http://a", frozenset({0, 1}))
    assert ring(a).watched("http://a") == []
    assert ring(a, Member("id-b", "http://b", frozenset())).watched("http://c") == []
    assert ring().watched("http://a") == []


def test_every_worker_is_watched_by_a_worker_of_another_sidecar() -> None:
    """Two sidecars of two workers each: by member id alone, a sidecar's workers came one after
    the other (their ids start with their addresses), and the first was watched by the second:
    when the whole sidecar died, nobody took the first one's shards early."""
    a0, a1, b0, b1 = (
        worker("a", 0, 9100),
        worker("a", 1, 9101),
        worker("b", 0, 9100),
        worker("b", 1, 9101),
    )
    assert sorted([a0, a1, b0, b1], key=lambda m: m.member_id) == [a0, a1, b0, b1]
    owners = ring(b1, a1, b0, a0)
    watchers = {w.url: m.url for m in (a0, a1, b0, b1) for w in owners.watched(m.url)}
    for watched, watcher in watchers.items():
        assert watched.split(":")[1] != watcher.split(":")[1], f"{watcher} watches {watched}"
    assert len(watchers) == 4  # each worker watched by one
    assert all(len(owners.watched(m.url)) == 1 for m in (a0, a1, b0, b1))  # each watches one


def test_with_unequal_worker_counts_a_whole_sidecar_is_still_watched_from_elsewhere() -> None:
    """Sidecar a of 2 workers, b of 1: the ring is a0, b0, a1, and a1's neighbour is a0. By the
    ring's neighbours alone, a0 watched a1, and when sidecar a died a1's shards waited for the
    group's session timeout. Now b0 watches both of a's workers, and a1 watches b0."""
    a0, a1, b0 = worker("a", 0, 9100), worker("a", 1, 9101), worker("b", 0, 9100)
    owners = ring(a1, b0, a0)
    assert owners.members == (a0, b0, a1)
    assert owners.watched(b0.url) == [a0, a1]
    assert owners.watched(a1.url) == [b0]
    assert owners.watched(a0.url) == []


def test_one_sidecar_s_workers_watch_each_other_in_turn() -> None:
    """With no other sidecar, a worker that dies alone is taken over early by the next one."""
    a0, a1, a2 = worker("a", 0, 9100), worker("a", 1, 9101), worker("a", 2, 9102)
    owners = ring(a2, a0, a1)
    assert [owners.watched(m.url) for m in (a0, a1, a2)] == [[a2], [a0], [a1]]


def test_a_member_id_of_an_older_worker_or_a_foreign_client() -> None:
    older = member_of("m1", "kpd-member http://h:1", frozenset({0}))
    assert older == Member("m1", "http://h:1", frozenset({0}), 0, "http://h:1")
    assert member_of("m2", "rdkafka", frozenset()) is None
    assert member_of("m3", "kpd-member http://h:1 x http://h:0", frozenset()) == Member(
        "m3", "http://h:1", frozenset(), 0, "http://h:1"
    )  # a place that is not one: taken for a sidecar of its own
    placed = member_of("m4", client_id("http://h:2", 3, "http://h:0"), frozenset({1}))
    assert placed == Member("m4", "http://h:2", frozenset({1}), 3, "http://h:0")
