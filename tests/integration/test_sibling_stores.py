"""The workers of a sidecar share its shards' stores and keep no standby of each other's shards
(real broker, real `kpd run` processes of two workers, real RocksDB folders).

A worker taking over a shard from another worker of its sidecar opens the folder that worker
left: after a SIGKILL it reads on from where the dead worker's last write left the store, and a
planned move frees the store with the fence. A worker paused (SIGSTOP) keeps its stores locked:
its sibling rebuilds the shards it takes from Kafka, into stores of its own, dropped once the
paused worker leads its shards again.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from kafka_helpers import led_shards, metric_total, metric_values, standby_shards, wait_for
from load_helpers import DelayLoad, produce_backlog

pytestmark = pytest.mark.timeout(600)
SHARDS = 4
BACKLOG = 4000  # far-future schedules: 1,000 a shard, which a rebuilt store reads again
SESSION = {"shards": str(SHARDS), "election_session_timeout_ms": "30000"}


def total(sidecar, name: str) -> float:
    """A metric summed over the sidecar's workers and labels (0 where none has a sample)."""
    with sidecar.client() as http:
        return metric_total(metric_values(http), name) or 0.0


def kept_by_shard(sidecar) -> dict[int, float]:
    """How many of the sidecar's workers keep each shard's schedules in a standby."""
    with sidecar.client() as http:
        values = metric_values(http)
    prefix = "kpd_shard_schedules_kept{shard="
    return {int(k[len(prefix) : -1]): v for k, v in values.items() if k.startswith(prefix)}


def delay_starts(sidecar) -> int:
    """How many delay roles the sidecar's workers have started (their log says each)."""
    return sidecar.log_path.read_text().count("delay leader started")


def sidecar_with_a_backlog(sidecar_factory, new_topic, bootstrap: str):
    """Sidecar s of two workers leading every shard, holding BACKLOG far-future schedules."""
    s = sidecar_factory("s", workers="2", **SESSION).start()
    wait_for(lambda: led_shards(s) == set(range(SHARDS)), 60, "the workers lead every shard")
    produce_backlog(bootstrap, s.env["KPD_BUFFER_TOPIC"], new_topic("far"), BACKLOG)
    wait_for(lambda: total(s, "kpd_schedules_pending") == BACKLOG, 120, "the backlog indexed")
    return s


def test_each_shard_is_kept_by_one_worker_of_each_other_sidecar_and_none_of_its_own(
    sidecar_factory, new_topic, kafka_bootstrap
):
    """Two sidecars of two workers: a shard's schedules are kept in a standby by one worker of
    the sidecar that does not lead it, by none of the one that does (its leader's store is on
    that machine), and no worker follows the pop state of its sibling's shards. When b stops
    under load, its shards move to a's workers, each taking its store from a's worker that kept
    it or finding it free: b delivers until fenced, so no delivery is late by a second, and no
    store is rebuilt."""
    a = sidecar_factory("a", workers="2", **SESSION).start()
    wait_for(lambda: led_shards(a) == set(range(SHARDS)), 60, "a leads every shard")
    assert standby_shards(a) == set()  # its workers' only other member is a sibling
    wait_for(lambda: sum(kept_by_shard(a).values()) == 0, 30, "no shard kept by a sibling")
    b = placed_beside(a, sidecar_factory)
    # The ring a0, b0, a1, b1: each worker watches one of the other sidecar's, and follows its pop
    # state.
    crossed = lambda: standby_shards(a) == led_shards(b) and standby_shards(b) == led_shards(a)  # noqa: E731
    wait_for(crossed, 30, "each sidecar following the pop state of the other's shards")
    late, _ = lateness_as_b_goes(a, b, signal.SIGTERM, new_topic, kafka_bootstrap)
    assert total(a, "kpd_shard_stores_rebuilt_total") == 0
    assert late < 1000
    # b's roles dropped their claims as they let their stores go (`foundation.store_claims`).
    assert list((b.data_dir / "shards" / "claims").iterdir()) == []


def test_a_killed_sidecars_shards_take_their_stores_from_the_siblings_standby_at_once(
    sidecar_factory, new_topic, kafka_bootstrap
):
    """SIGKILL of sidecar b under load: a's workers take its shards on silence, long before the
    group's session (30 s here) shows the move. A shard kept by the sibling of the worker that
    takes it is claimed (`foundation.store_claims`), so the sibling's standby lets its store go
    at once: no start after the kill waits out the unfenced wait, none rebuilds a store, and no
    delivery is as late as the failover goal's bound (5 s). Before claims, such a start fenced
    after 3 s, waited 5 s more and rebuilt the shard."""
    a = sidecar_factory("a", workers="2", **SESSION).start()
    wait_for(lambda: led_shards(a) == set(range(SHARDS)), 60, "a leads every shard")
    b = placed_beside(a, sidecar_factory)
    late, logged = lateness_as_b_goes(a, b, signal.SIGKILL, new_topic, kafka_bootstrap)
    assert "taking over a silent sidecar's shards" in logged
    assert "still held by another worker; fencing" not in logged
    assert total(a, "kpd_shard_stores_rebuilt_total") == 0
    assert late < 5000
    claims = (a.data_dir / "shards" / "claims").iterdir()
    assert {int(claim.name.split(".")[0]) for claim in claims} == set(range(SHARDS))


def placed_beside(a, sidecar_factory):
    """Sidecar b of two workers, started beside a: two shards led by each, and each shard kept
    by one worker of the sidecar that does not lead it, by none of the one that does."""
    b = sidecar_factory("b", workers="2", **SESSION).start()
    wait_for(lambda: len(led_shards(a)) == len(led_shards(b)) == 2, 60, "two shards each")

    def kept_elsewhere() -> bool:
        for keeper, leader in ((a, b), (b, a)):
            led, kept = led_shards(leader), kept_by_shard(keeper)
            if {s: kept.get(s, 0.0) for s in range(SHARDS)} != {
                s: float(s in led) for s in range(SHARDS)
            }:
                return False
        return True

    wait_for(kept_elsewhere, 30, "each shard kept once, by the sidecar that does not lead it")
    return b


def lateness_as_b_goes(a, b, sig: signal.Signals, new_topic, bootstrap: str) -> tuple[int, str]:
    """Send `sig` to sidecar b under load until a leads every shard: the worst lateness at the
    broker of the load (exactly once, never early), and what a logged from the signal on."""
    target = new_topic("moving", config={"message.timestamp.type": "LogAppendTime"})
    with DelayLoad(bootstrap, a.env["KPD_BUFFER_TOPIC"], target) as delay:
        wait_for(lambda: len(delay.acknowledged) > 100, 60, "load flowing")
        logged = len(a.log_path.read_text())
        assert b.terminate(sig) == (0 if sig == signal.SIGTERM else -sig)
        wait_for(lambda: led_shards(a) == set(range(SHARDS)), 30, "a leads every shard")
        left = len(delay.acknowledged)
        wait_for(lambda: len(delay.acknowledged) > left + 150, 60, "load after b left")
    messages = delay.assert_delivered(quiet_s=3.0)
    late = sorted(m.timestamp()[1] - int(dict(m.headers())["kpd-deliver-at"]) for m in messages)
    since = a.log_path.read_text()[logged:]
    waited = since.count("held by another worker; waiting")
    print(f"\nb sent {sig.name}: lateness at the broker p50 {late[len(late) // 2]} ms, max "
          f"{late[-1]} ms; {waited} starts waited for a sibling's store")  # fmt: skip
    return late[-1], since


def test_a_killed_workers_shards_are_taken_over_by_its_sibling_from_the_stores_it_left(
    sidecar_factory, new_topic, kafka_bootstrap
):
    """SIGKILL of one of a sidecar's two workers under load: its sibling takes its shards early
    and opens their stores as the dead worker left them; the worker started in its place takes
    its share back, the fence freeing the stores. 0 lost, 0 duplicates, 0 early, the backlog
    intact, no store rebuilt, and the four starts read a few records, not the 2,000 of a
    rebuild of two shards."""
    s = sidecar_with_a_backlog(sidecar_factory, new_topic, kafka_bootstrap)
    assert standby_shards(s) == set() and sum(kept_by_shard(s).values()) == 0
    read_before, starts_before = total(s, "kpd_delay_start_records_total"), delay_starts(s)
    target = new_topic("moving", config={"message.timestamp.type": "LogAppendTime"})
    with DelayLoad(kafka_bootstrap, s.env["KPD_BUFFER_TOPIC"], target) as delay:
        wait_for(lambda: len(delay.acknowledged) > 100, 60, "load flowing")
        victim = s.worker_pids()[0]
        os.kill(victim, signal.SIGKILL)
        # Two starts by the sibling, two by the worker that replaced the dead one.
        wait_for(lambda: delay_starts(s) >= starts_before + 4, 90, "the shards taken and back")
        assert victim not in s.worker_pids()
        left = len(delay.acknowledged)
        wait_for(lambda: len(delay.acknowledged) > left + 150, 60, "load after the moves")
    delay.assert_delivered(quiet_s=3.0)
    wait_for(lambda: total(s, "kpd_schedules_pending") == BACKLOG, 30, "the backlog intact")
    read = total(s, "kpd_delay_start_records_total") - read_before
    print(f"\n{delay_starts(s) - starts_before} delay role starts read {read:.0f} records")
    assert total(s, "kpd_shard_stores_rebuilt_total") == 0
    assert read < BACKLOG // 4


def test_a_paused_workers_shards_are_rebuilt_by_its_sibling_and_handed_back(
    sidecar_factory, new_topic, kafka_bootstrap
):
    """SIGSTOP of one of a sidecar's two workers under load: it keeps its stores locked, so its
    sibling, having taken its shards on silence and fenced it, rebuilds them from Kafka into
    stores of its own and delivers them while the worker stays paused; resumed, the worker
    leads its shards again, and the rebuilt stores are dropped. 0 lost, 0 duplicates, 0 early,
    and no delivery as late as the pause was long."""
    s = sidecar_with_a_backlog(sidecar_factory, new_topic, kafka_bootstrap)
    target = new_topic("paused", config={"message.timestamp.type": "LogAppendTime"})
    private = lambda: list((s.data_dir / "shards").glob("shard-*.*"))  # noqa: E731
    with DelayLoad(kafka_bootstrap, s.env["KPD_BUFFER_TOPIC"], target) as delay:
        wait_for(lambda: len(delay.acknowledged) > 100, 60, "load flowing")
        paused = s.worker_pids()[0]
        os.kill(paused, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            rebuilt = lambda: total(s, "kpd_shard_stores_rebuilt_total") > 0  # noqa: E731
            wait_for(rebuilt, 30, "the sibling rebuilds a shard of the paused worker")
            assert private()
            left = len(delay.acknowledged)
            wait_for(lambda: len(delay.acknowledged) > left + 500, 60, "load while paused")
        finally:
            os.kill(paused, signal.SIGCONT)
        pause_s = time.monotonic() - stopped
        wait_for(lambda: private() == [], 90, "the rebuilt stores dropped")
        assert paused in s.worker_pids()
        left = len(delay.acknowledged)
        wait_for(lambda: len(delay.acknowledged) > left + 150, 60, "load after the pause")
    messages = delay.assert_delivered(quiet_s=3.0)
    wait_for(lambda: total(s, "kpd_schedules_pending") == BACKLOG, 30, "the backlog intact")
    late = sorted(m.timestamp()[1] - int(dict(m.headers())["kpd-deliver-at"]) for m in messages)
    rebuilt_stores = total(s, "kpd_shard_stores_rebuilt_total")
    print(f"\npaused {pause_s:.1f} s; lateness at the broker p50 {late[len(late) // 2]} ms, max "
          f"{late[-1]} ms; {rebuilt_stores:.0f} stores rebuilt")  # fmt: skip
    assert late[-1] < (pause_s - 5) * 1000
