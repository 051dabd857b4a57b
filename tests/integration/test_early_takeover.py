"""Early takeover tells a dead sidecar from a slow one (`cluster.successor`), real broker, two
real `kpd run` sidecars: a short pause keeps a sidecar's shards, a long one loses them, a sidecar
that lost them on silence and answered again may stay silent longer next time, and a killed one
is taken over on the refused connections at once; calls for a gone owner's shards made through
a third sidecar reach its guardian."""

from __future__ import annotations

import re
import signal
import time

import pytest
from kafka_helpers import (
    led_shards,
    make_producer,
    metric_values,
    pop_all,
    produce_spread,
    standby_shards,
    two_free_ports,
    unique,
    wait_for,
)

from cluster.successor import SILENT_S
from foundation.shards import ShardMap
from kpd_client import KpdClient

pytestmark = pytest.mark.timeout(300)
SHORT_PAUSE_S = SILENT_S - 0.6  # a probe that times out takes 0.5 s: silence seen is shorter


def counters(sidecar) -> tuple[float, float, float]:
    """(takeovers on silence, on refusals, false alarms) counted by `sidecar`."""
    with sidecar.client() as http:
        values = metric_values(http)
    return (
        values.get("kpd_early_takeovers_total{cause=silent}", 0.0),
        values.get("kpd_early_takeovers_total{cause=refused}", 0.0),
        values.get("kpd_early_takeover_false_alarms_total", 0.0),
    )


def roles_running(sidecar, shards: set[int]) -> bool:
    """Its log says the pop and the delay role of each of `shards` have started: a sidecar
    paused while it still starts them owes that work after the pause, and answers late."""
    lines = sidecar.log_path.read_text().splitlines()
    return all(
        any(event in line and re.search(rf"\bshard={shard}\b", line) for line in lines)
        for shard in shards
        for event in ("pop service started", "delay leader started")
    )


def paused(sidecar, seconds: float) -> None:
    sidecar.signal(signal.SIGSTOP)
    time.sleep(seconds)  # the pause itself is what is tested: nothing to wait for
    sidecar.signal(signal.SIGCONT)


def test_silence_is_allowed_longer_than_refusals_and_longer_after_a_false_alarm(sidecar_factory):
    a, b = (sidecar_factory(n, shards="2").start() for n in "ab")
    wait_for(lambda: led_shards(a) and led_shards(b), 60, "a and b lead a shard each")
    a_own, b_own = led_shards(a), led_shards(b)
    wait_for(lambda: roles_running(a, a_own) and roles_running(b, b_own), 60, "their roles run")

    # Shorter than the silence allowed (a second of silence took the shards before).
    paused(b, SHORT_PAUSE_S)
    wait_for(lambda: led_shards(b) == b_own, 30, "b answers again")
    assert counters(a) == (0, 0, 0)

    # Longer: a takes b's shards while b is paused.
    b.signal(signal.SIGSTOP)
    wait_for(lambda: counters(a)[0] == 1, SILENT_S + 2.5, "a takes b's shards on silence")
    wait_for(lambda: led_shards(a) == a_own | b_own, 10, "a leads b's shards too")
    b.signal(signal.SIGCONT)
    wait_for(lambda: counters(a)[2] == 1, 30, "a counts b's return as a false alarm")
    wait_for(lambda: led_shards(a) == a_own and led_shards(b) == b_own, 60, "b leads its own")

    # A 4.5 s pause, past the first allowance, is now within the doubled one.
    paused(b, SILENT_S + 1.5)
    wait_for(lambda: led_shards(b) == b_own, 30, "b answers again")
    assert counters(a) == (1, 0, 1)

    # Killed: nothing listens, and a takes b's shards within about a second.
    b.terminate(signal.SIGKILL)
    killed = time.monotonic()
    wait_for(lambda: counters(a)[1] == 1, 10, "a takes b's shards on refusals")
    taken_s = time.monotonic() - killed
    assert counters(a) == (1, 1, 1)
    assert taken_s < SILENT_S  # not the silence's allowance (now twice SILENT_S)
    wait_for(lambda: led_shards(a) == a_own | b_own, 30, "a leads every shard")


def test_group_stats_answer_while_the_group_still_names_a_dead_owner(sidecar_factory, new_topic):
    """A group that still names a killed sidecar as owner (a session of 30 s here) must not fail
    the stats of a sidecar that took its shards over early: they used to be asked of the dead
    owner too, and answered 503 until the group reassigned its shards."""
    slow_group = {"shards": "2", "election_session_timeout_ms": "30000"}
    a, b = (sidecar_factory(n, **slow_group).start() for n in "ab")
    wait_for(lambda: led_shards(a) and led_shards(b), 60, "a and b lead a shard each")
    topic = new_topic("work", partitions=2)
    with a.client() as http:  # b's shard's part asked of b, once a knows the owners
        wait_for(lambda: http.get("/v1/groups/g").status_code == 200, 30, "stats from a")
    b.terminate(signal.SIGKILL)
    killed = time.monotonic()
    wait_for(lambda: led_shards(a) == {0, 1}, 10, "a takes b's shard on refusals")
    with a.client() as http:  # once a's pop role of b's shard has started
        wait_for(lambda: http.get("/v1/groups/g").status_code == 200, 15, "stats from a")
        stats_s = time.monotonic() - killed
        pop = http.post(f"/v1/groups/g/topics/{topic}/pop", json={"wait_ms": 0})
    assert pop.status_code == 200, pop.text
    print(f"\nstats answered {stats_s:.1f} s after the kill")
    assert time.monotonic() - killed < 20  # the group still names b: its session lasts 30 s


def test_every_worker_of_a_killed_sidecar_is_taken_over_early(sidecar_factory):
    """Two sidecars of two workers each, a group session of 30 s: a SIGKILL of one sidecar (its
    workers die with it) moves all its shards to the other within seconds, by early takeover.
    The worker ports put a's two workers one after the other by member id, which was the
    watching order: a's first worker was watched by its second, and its shard waited out the
    session."""
    first = two_free_ports()
    second = two_free_ports()
    while abs(second - first) < 2:  # two pairs, apart
        second = two_free_ports()
    ports = sorted([first, second])
    workers = {"workers": "2", "shards": "4", "election_session_timeout_ms": "30000"}
    a = sidecar_factory("a", worker_port_base=str(ports[0]), **workers).start()
    b = sidecar_factory("b", worker_port_base=str(ports[1]), **workers).start()
    wait_for(lambda: len(led_shards(a)) == len(led_shards(b)) == 2, 60, "two shards each")
    a.terminate(signal.SIGKILL)
    killed = time.monotonic()
    wait_for(lambda: led_shards(b) == {0, 1, 2, 3}, 15, "b leads every shard")
    print(f"\nb led every shard {time.monotonic() - killed:.1f} s after the kill")


def test_a_killed_sidecar_of_more_workers_than_the_other_s_is_taken_over_early(sidecar_factory):
    """Sidecar a of two workers, b of one, a group session of 30 s. The ring is a0, b0, a1 (or
    b0, a0, a1): by the ring's neighbours alone one of a's workers watched the other, and when a
    was killed that worker's shard waited out the session. b's worker watches both now."""
    session = {"shards": "3", "election_session_timeout_ms": "30000"}
    a = sidecar_factory("a", workers="2", worker_port_base=str(two_free_ports()), **session)
    a.start()
    b = sidecar_factory("b", workers="1", **session).start()
    wait_for(lambda: len(led_shards(a)) == 2 and len(led_shards(b)) == 1, 60, "a shard each")
    a.terminate(signal.SIGKILL)
    killed = time.monotonic()
    wait_for(lambda: led_shards(b) == {0, 1, 2}, 15, "b leads every shard")
    print(f"\nb led every shard {time.monotonic() - killed:.1f} s after the kill")


@pytest.mark.parametrize("gone", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "paused"])
def test_a_third_sidecar_s_calls_for_a_gone_owner_s_shards_reach_its_guardian(
    sidecar_factory, new_topic, kafka_bootstrap, gone
):
    """Three sidecars, a group session of 30 s. Messages popped through sidecar t, one of each
    shard's lanes among them; then the owner of one shard is killed, or paused (its kernel still
    takes connections, and nothing answers them). t's acks of that shard's receipts, and its pops
    of that shard's new messages, reach the gone owner's guardian (the sidecar that takes its
    shards over early) within seconds. They went to the gone owner: a killed one's failed until
    the group named another, a session after the kill, and a paused one's were held for 60 s."""
    session = {"shards": "3", "election_session_timeout_ms": "30000"}
    nodes = [sidecar_factory(name, **session).start() for name in "abc"]
    each = lambda: all(len(led_shards(n)) == 1 and standby_shards(n) for n in nodes)  # noqa: E731
    wait_for(each, 60, "a shard led and one followed by each sidecar")
    owner = nodes[0]
    guardian = next(n for n in nodes[1:] if standby_shards(n) == led_shards(owner))
    third = next(n for n in nodes[1:] if n is not guardian)
    topic = new_topic("work", partitions=6)
    lanes = ShardMap(3, 3).of_lane
    group = next(g for g in (unique("g") for _ in range(100))
                 if {lanes(g, topic, p) for p in range(6)} == {0, 1, 2})  # fmt: skip
    producer = make_producer(kafka_bootstrap)
    first = produce_spread(producer, topic, 6, "first")
    with KpdClient(third.url, retry_deadline_s=15) as kpd:
        popped = pop_all(kpd, group, topic, len(first), 15)
        owner.signal(gone)
        started = time.monotonic()
        try:
            acks = kpd.ack(group, [m.receipt for m in popped])
            acked_s = time.monotonic() - started
            later = produce_spread(producer, topic, 6, "later")
            again = pop_all(kpd, group, topic, len(later), 15)
            popped_s = time.monotonic() - started
        finally:
            owner.signal(signal.SIGCONT)  # a paused one then stops as the others do
    assert [a["status"] for a in acks] == ["acked"] * len(popped)
    assert sorted(m.value for m in again) == sorted(later)
    print(f"\nthrough the third sidecar: acked {acked_s:.1f} s, popped {popped_s:.1f} s after")
    assert popped_s < 15  # the group names the gone owner for 30 s
