"""The conductor's handover: a shard moved away keeps its delay role until the new owner fences
it, while its pop role stops at once and the standby leaves the shard alone (threads only; the
Kafka side is `tests/integration/test_handover.py`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kafka_helpers import wait_for
from role_helpers import FencingRole, HandingRole, HeldRole, SteppingRole

from cluster import conductor, standby_slot
from cluster.conductor import Conductor
from delay_service.schedules import Freshness
from foundation.supervision import LoopHealth
from foundation.watchdog import Watchdog
from revive.service import PopService


class SlowSteppingRole(SteppingRole):
    """A step as long as an idle role's longest wait (`MAX_WAIT_S`, `QUIET_WAIT_S`)."""

    def step(self) -> None:
        super().step()
        time.sleep(0.25)


class SlowHandingRole(SlowSteppingRole, HandingRole):
    pass


class Fixture:
    def __init__(
        self,
        delay_kind: type[HandingRole] = HandingRole,
        pop_kind: type = SteppingRole,
        keeps_all: bool = False,  # standby_schedules: "all", else "next"
        standby_kind: type[HeldRole] = HeldRole,
    ) -> None:
        self.made: list[SteppingRole] = []
        self.standbys: list[tuple[frozenset[int], frozenset[int]]] = []  # (skipped, followed)
        self.standby_roles: list[HeldRole] = []
        self.standbys_start_at_once = True  # else each catches up when the test says so
        self.short_of: frozenset[int] = frozenset()  # stores another worker holds
        self.keeps_all, self.standby_kind = keeps_all, standby_kind
        delay, pop = self._maker(delay_kind, "delay"), self._maker(pop_kind, "pop")
        roles = {"delay": delay, "pop": pop}
        watchdog = Watchdog(report_after_s=60, give_up_after_s=120, on_stall=lambda _: None)
        self.conductor = Conductor(watchdog, roles, self._standby, self._kept)  # type: ignore[arg-type]

    def _kept(self, skipped: frozenset[int], follow: frozenset[int]) -> frozenset[int]:
        return frozenset(range(4)) - skipped if self.keeps_all else follow

    def _maker(
        self, kind: type[SteppingRole], name: str
    ) -> Callable[[int, LoopHealth], SteppingRole]:
        def make(shard: int, health: LoopHealth) -> SteppingRole:
            self.made.append(kind(name, shard))
            self.made[-1].health = health
            return self.made[-1]

        return make

    def _standby(
        self, skipped: frozenset[int], follow: frozenset[int], keeps: frozenset[int], _: LoopHealth
    ) -> SteppingRole:
        self.standbys.append((skipped, follow))
        role = self.standby_kind("standby", -1)
        # As a `Standby` that found every store it is to keep free (`short_of` says otherwise).
        role.wanted = keeps  # type: ignore[attr-defined]
        role.kept = role.wanted - self.short_of  # type: ignore[attr-defined]
        role.started_at = time.monotonic()  # type: ignore[attr-defined]
        self.standby_roles.append(role)
        if self.standbys_start_at_once:
            self.standby_roles[-1].may_start.set()
        return self.standby_roles[-1]

    def running(self, name: str, shard: int) -> list[SteppingRole]:
        return [r for r in self.made if (r.name, r.shard) == (name, shard) and not r.closed]

    def started(self) -> bool:
        return all(self.conductor.started(shard) for shard in self.conductor.led)


def test_a_moved_shard_delivers_until_fenced_and_its_standby_waits_for_that() -> None:
    f = Fixture()
    everything, some = frozenset({0, 1, 2}), frozenset({0, 1})
    f.conductor.reconcile(everything, frozenset())
    wait_for(f.started, 5, "roles started")
    f.conductor.reconcile(some, everything)  # shard 2 moved to another member
    assert f.conductor.led == some
    (delay,) = f.running("delay", 2)
    assert delay.handing_over
    wait_for(lambda: f.running("pop", 2) == [], 5, "the pop role stopped")  # asked at once
    assert f.standbys == [(everything, frozenset())]  # not restarted: shard 2 is written here
    f.conductor.reconcile(some, everything)
    assert not delay.closed  # not fenced yet: it goes on
    delay.fenced.set()
    wait_for(lambda: delay.closed, 5, "the fenced role closed")
    f.conductor.reconcile(some, everything)
    assert f.standbys == [(everything, frozenset()), (some, frozenset({2}))]  # now it follows 2
    f.conductor.stop()


def test_a_delay_role_given_away_while_starting_hands_over_once_started() -> None:
    """Stopped outright, a role that had fenced the shard's previous writer left the shard with
    no writer until the group gave it back and another start fenced it (1.4 s in a CI run)."""
    f = Fixture(delay_kind=HeldRole)
    f.conductor.reconcile(frozenset({0, 1}), frozenset())
    (delay,) = f.running("delay", 1)
    assert isinstance(delay, HeldRole)
    assert f.conductor.freshness(1) is Freshness.CATCHING_UP
    f.conductor.reconcile(frozenset({0}), frozenset())  # shard 1 moved on, its role not started
    assert delay.handing_over and f.running("delay", 1) == [delay]
    wait_for(lambda: f.running("pop", 1) == [], 5, "the pop role stopped")
    assert f.conductor.freshness(1) is Freshness.CATCHING_UP  # the index waits for the start
    delay.may_start.set()
    wait_for(lambda: f.conductor.freshness(1) is Freshness.CURRENT, 5, "started, delivering")
    f.conductor.reconcile(frozenset({0}), frozenset())
    assert not delay.closed  # goes on until fenced
    delay.fenced.set()
    wait_for(lambda: delay.closed, 5, "the fenced role closed")
    f.conductor.reconcile(frozenset({0}), frozenset())
    assert f.conductor.freshness(1) is Freshness.ELSEWHERE
    f.conductor.stop()


def test_a_shard_moved_back_before_its_fence_starts_afresh() -> None:
    f = Fixture()
    f.conductor.reconcile(frozenset({0, 1}), frozenset())
    wait_for(f.started, 5, "roles started")
    f.conductor.reconcile(frozenset({0}), frozenset())
    (old,) = f.running("delay", 1)

    def fresh_role() -> bool:
        f.conductor.reconcile(frozenset({0, 1}), frozenset())
        return len(f.running("delay", 1)) == 1 and f.running("delay", 1)[0] is not old

    wait_for(fresh_role, 5, "a fresh delay role")
    assert old.closed and not f.running("delay", 1)[0].handing_over
    f.conductor.stop()


def test_a_handover_nobody_fences_ends_at_its_bound(monkeypatch) -> None:
    monkeypatch.setattr(conductor, "HANDOVER_S", 0.2)
    f = Fixture()
    f.conductor.reconcile(frozenset({0, 1}), frozenset())
    wait_for(f.started, 5, "roles started")
    f.conductor.reconcile(frozenset({0}), frozenset())
    (delay,) = f.running("delay", 1)
    time.sleep(0.3)
    f.conductor.reconcile(frozenset({0}), frozenset())
    wait_for(lambda: delay.closed, 1, "the handover stopped at its bound")
    f.conductor.stop()


def test_leaving_waits_for_the_fences_up_to_a_bound() -> None:
    f = Fixture()
    f.conductor.reconcile(frozenset({0, 1}), frozenset())
    wait_for(f.started, 5, "roles started")
    delays = [f.running("delay", shard)[0] for shard in (0, 1)]
    threading.Timer(0.2, lambda: [d.fenced.set() for d in delays]).start()
    began = time.monotonic()
    f.conductor.leave(timeout_s=10, others=lambda: True)
    took = time.monotonic() - began
    assert all(d.closed for d in delays) and 0.15 < took < 2  # ended by the fences
    f.conductor.reconcile(frozenset(), frozenset())
    f.conductor.stop()
    f2 = Fixture()
    f2.conductor.reconcile(frozenset({0}), frozenset())
    wait_for(f2.started, 5, "roles started")
    began = time.monotonic()
    f2.conductor.leave(timeout_s=0.3, others=lambda: True)  # nobody fences: the bound
    assert 0.25 < time.monotonic() - began < 2
    f2.conductor.stop()
    assert all(role.closed for role in f2.made)
    f3 = Fixture()
    f3.conductor.reconcile(frozenset({0}), frozenset())
    wait_for(f3.started, 5, "roles started")
    began = time.monotonic()
    f3.conductor.leave(timeout_s=10, others=lambda: False)  # nobody left to take the shard
    assert time.monotonic() - began < 1
    f3.conductor.stop()


def test_a_workers_roles_stop_together() -> None:
    """Each role ends after its current step; asked one after the other, 8 shards' roles took
    one step each in turn."""
    f = Fixture(SlowHandingRole, SlowSteppingRole)
    shards = frozenset(range(8))
    f.conductor.reconcile(shards, frozenset())
    wait_for(f.started, 5, "roles started")
    began = time.monotonic()
    f.conductor.reconcile(frozenset(), frozenset())  # the pop roles stop, the delay ones hand over
    pops_closed = lambda: [r.shard for r in f.made if r.name == "pop" and r.closed]  # noqa: E731
    wait_for(lambda: pops_closed() == sorted(shards), 0.6 - (time.monotonic() - began), "pops")
    began = time.monotonic()
    f.conductor.stop()
    assert time.monotonic() - began < 0.6
    assert all(role.closed for role in f.made)


class DephasedHandingRole(SlowHandingRole):
    """Steps out of phase, the last shard first: stopped one after another in shard order, each
    would end a step after the one before."""

    def start(self) -> None:
        time.sleep((7 - self.shard) * 0.03)


def test_handovers_that_end_together_stop_together(monkeypatch) -> None:
    """Handovers ending at one reconcile (at their bound, or moved back here) stop as one; in
    turn they took 1.4-1.8 s."""
    f = Fixture(DephasedHandingRole)
    shards = frozenset(range(8))
    # A bound of 0 has passed by the next reconcile; 60 s has not, so there they come back.
    for handover_s, then_led in ((0.0, frozenset()), (60.0, shards)):
        monkeypatch.setattr(conductor, "HANDOVER_S", handover_s)
        f.conductor.reconcile(shards, frozenset())
        wait_for(f.started, 5, "roles started")
        f.conductor.reconcile(frozenset(), frozenset())
        delays = [f.running("delay", shard)[0] for shard in sorted(shards)]
        assert all(delay.handing_over for delay in delays)
        f.conductor.reconcile(then_led, frozenset())
        ended = lambda roles=delays: all(delay.closed for delay in roles)  # noqa: E731
        wait_for(ended, 0.6, "the handovers stopped")
    f.conductor.stop()


def test_the_index_is_current_where_a_started_role_or_a_caught_up_standby_keeps_a_shard() -> None:
    """The API answers from the index where it is current, waits where what will keep the
    shard is starting (a GET right after an election found nothing while the old standby
    stopped and before the shard's roles were added), and asks the owner elsewhere."""
    current, catching_up, elsewhere = Freshness.CURRENT, Freshness.CATCHING_UP, Freshness.ELSEWHERE
    f = Fixture(HeldRole, keeps_all=True)
    f.standbys_start_at_once = False
    f.conductor.reconcile(frozenset({0, 1}), frozenset())

    def fresh() -> list[Freshness]:
        return [f.conductor.freshness(shard) for shard in range(4)]

    wait_for(lambda: len(f.running("delay", 1)) == 1, 5, "delay roles made")
    assert fresh() == [catching_up] * 4  # led, not started; kept by a standby catching up
    for role in f.running("delay", 0) + f.running("delay", 1) + f.standby_roles:
        role.may_start.set()
    wait_for(lambda: fresh() == [current] * 4, 5, "roles started, the standby caught up")
    f.conductor.reconcile(frozenset({0}), frozenset())  # shard 1 moves away
    (delay,) = f.running("delay", 1)
    assert fresh()[1] is current  # its delay role here still writes it
    delay.fenced.set()
    wait_for(lambda: fresh()[1] is elsewhere, 5, "fenced: its new owner writes it now")
    f.conductor.reconcile(frozenset({0, 2}), frozenset())  # 2 comes here, 1 to the standby
    wait_for(lambda: len(f.running("delay", 2)) == 1, 5, "a delay role for shard 2")
    assert fresh() == [current, catching_up, catching_up, catching_up]
    f.standby_roles[-1].may_start.set()
    wait_for(lambda: fresh()[1] is current, 5, "the new standby caught up")
    assert fresh()[2] is catching_up  # led, its delay role still starting
    f.running("delay", 2)[0].may_start.set()
    wait_for(lambda: fresh() == [current] * 4, 5, "shard 2 led, the new standby caught up")
    f.conductor.stop()
    assert fresh() == [elsewhere] * 4
    g = Fixture(keeps_all=False)  # standby_schedules = "next": the followed shards only
    g.conductor.reconcile(frozenset({0}), frozenset({3}))
    wait_for(lambda: [g.conductor.freshness(s) for s in (0, 3)] == [current] * 2, 5, "started")
    assert [g.conductor.freshness(s) for s in (1, 2)] == [elsewhere] * 2
    g.conductor.stop()


def test_a_standby_short_of_a_store_another_worker_held_answers_elsewhere_and_tries_again(
    monkeypatch,
) -> None:
    """A store still held by another worker of the sidecar (its roles handing the shard over)
    is left out of a standby's start: the index does not keep that shard, so the API asks the
    owner, and the standby restarts after `STANDBY_RETRY_S` to take it, not before."""
    monkeypatch.setattr(standby_slot, "STANDBY_RETRY_S", 0.3)
    f = Fixture(keeps_all=True)
    f.short_of = frozenset({3})
    started = time.monotonic()
    f.conductor.reconcile(frozenset({0}), frozenset())
    wait_for(lambda: f.conductor.freshness(2) is Freshness.CURRENT, 5, "the standby caught up")
    assert f.conductor.freshness(3) is Freshness.ELSEWHERE
    f.short_of = frozenset()

    def restarted() -> bool:
        f.conductor.reconcile(frozenset({0}), frozenset())
        return len(f.standbys) == 2

    wait_for(restarted, 5, "the standby restarted")
    assert time.monotonic() - started >= 0.3
    wait_for(lambda: f.conductor.freshness(3) is Freshness.CURRENT, 5, "shard 3 kept now")
    # The store taken: a reconcile restarts nothing, even once the standby has run past
    # STANDBY_RETRY_S (its start moved back by that much, rather than waited out).
    f.standby_roles[-1].started_at -= standby_slot.STANDBY_RETRY_S  # type: ignore[attr-defined]
    f.conductor.reconcile(frozenset({0}), frozenset())
    assert len(f.standbys) == 2
    f.conductor.stop()


class SlowStandby(HeldRole):
    def step(self) -> None:
        super().step()
        time.sleep(0.25)


def test_a_shard_elected_here_is_caught_up_on_not_elsewhere_while_the_conductor_takes_it() -> None:
    """Between the old standby's stop and the start of the shard's roles nothing here keeps the
    shard, yet the group names this worker its owner: a call must wait, not be refused (what
    failed in CI with e3b9790)."""
    f = Fixture(keeps_all=True, standby_kind=SlowStandby)
    f.conductor.reconcile(frozenset({0}), frozenset())
    wait_for(lambda: f.conductor.freshness(1) is Freshness.CURRENT, 5, "the standby keeps 1")
    taking = threading.Thread(target=f.conductor.reconcile, args=(frozenset({0, 1}), frozenset()))
    seen = []
    taking.start()
    while taking.is_alive():
        seen.append(f.conductor.freshness(1))
        time.sleep(0.001)
    wait_for(lambda: f.conductor.freshness(1) is Freshness.CURRENT, 5, "its delay role started")
    assert Freshness.CATCHING_UP in seen and Freshness.ELSEWHERE not in seen
    f.conductor.stop()


class StuckRole(SteppingRole):
    """A step that, once `stuck` is set, hangs in a call that ignores the stop request (as
    `send_offsets_to_transaction` does for up to 10 s with the broker away) until `freed`."""

    def __init__(self, name: str = "role", shard: int = 0) -> None:
        super().__init__(name, shard)
        self.stuck, self.freed = threading.Event(), threading.Event()

    def step(self) -> None:
        super().step()
        if self.stuck.is_set():
            self.stuck.clear()
            assert self.freed.wait(10)


def hang(f: Fixture, name: str, shard: int) -> StuckRole:
    """Hang the running `name` role of `shard` in its call (once it is in it)."""
    (role,) = f.running(name, shard)
    assert isinstance(role, StuckRole)
    role.stuck.set()
    wait_for(lambda: not role.stuck.is_set(), 5, f"the {name} role stuck in its call")
    return role


def test_a_revoked_role_stuck_in_a_call_holds_up_only_its_own_shard(monkeypatch) -> None:
    """The conductor waited for a revoked pop role to end before it started the shards newly
    given here (9 s in a broker restart). Now the others start at once; the same shard coming
    back waits for its old role (never two of one role on one shard here), up to a bound."""
    f = Fixture(pop_kind=StuckRole)
    f.conductor.reconcile(frozenset({0, 1}), frozenset())
    wait_for(f.started, 5, "roles started")
    old = hang(f, "pop", 1)
    began = time.monotonic()
    f.conductor.reconcile(frozenset({0}), frozenset())  # shard 1 revoked
    f.conductor.reconcile(frozenset({0, 2}), frozenset())  # shard 2 given
    assert time.monotonic() - began < 0.2
    wait_for(f.started, 5, "shard 2's roles started")
    assert f.conductor.led == {0, 2} and not old.closed
    for _ in range(3):  # shard 1 comes back while its old pop role is stuck
        f.conductor.reconcile(frozenset({0, 1, 2}), frozenset())
    assert 1 not in f.conductor.led and f.running("pop", 1) == [old]
    assert f.conductor.freshness(1) is Freshness.CATCHING_UP  # calls wait, not refused
    old.freed.set()

    def back() -> bool:
        f.conductor.reconcile(frozenset({0, 1, 2}), frozenset())
        return f.conductor.led == {0, 1, 2} and f.started()

    wait_for(back, 5, "shard 1 led again once its old role ended")
    assert old.closed and len(f.running("pop", 1)) == 1
    # A role that never ends holds its shard back only up to the bound.
    monkeypatch.setattr(conductor, "STOP_TIMEOUT_S", 0.3)
    stuck = hang(f, "pop", 1)
    retired = time.monotonic()
    f.conductor.reconcile(frozenset({0, 2}), frozenset())
    f.conductor.reconcile(frozenset({0, 1, 2}), frozenset())
    assert 1 not in f.conductor.led

    def taken_back() -> bool:
        f.conductor.reconcile(frozenset({0, 1, 2}), frozenset())
        return 1 in f.conductor.led

    wait_for(taken_back, 5, "shard 1 led again past the bound")
    assert time.monotonic() - retired >= 0.3 and not stuck.closed
    stuck.freed.set()
    f.conductor.stop()
    assert all(role.closed for role in f.made)


class StuckHandingRole(StuckRole, HandingRole):
    pass


def test_the_standby_takes_a_shard_only_once_its_old_role_ended(monkeypatch) -> None:
    """A handover stopped at its bound may still be in its last step, writing the shard's
    schedules: the standby leaves the shard alone until that role ends (one writer)."""
    monkeypatch.setattr(conductor, "HANDOVER_S", 0.0)
    f = Fixture(delay_kind=StuckHandingRole)
    f.conductor.reconcile(frozenset({0, 1}), frozenset())
    wait_for(f.started, 5, "roles started")
    delay = hang(f, "delay", 1)
    f.conductor.reconcile(frozenset({0}), frozenset({1}))  # handed over, bound 0: past next time
    f.conductor.reconcile(frozenset({0}), frozenset({1}))
    assert f.standbys[-1] == (frozenset({0, 1}), frozenset()) and not delay.closed
    delay.freed.set()

    def followed() -> bool:
        f.conductor.reconcile(frozenset({0}), frozenset({1}))
        return f.standbys[-1] == (frozenset({0}), frozenset({1}))

    wait_for(followed, 5, "the standby follows shard 1 once its old role ended")
    assert delay.closed
    f.conductor.stop()


def test_a_revoke_waits_out_the_fence_in_flight_and_no_other_begins() -> None:
    """The group's revoke of a shard returns (and the worker rejoins, letting the group give the
    shard to another) only once a reconcile here has seen it and no role of the shard is inside
    an `init_transactions`: a fence sent late would land after the next owner's and fail its
    first commit. The pop role, asked to stop, never fences its second id."""
    f = Fixture(pop_kind=FencingRole)
    f.conductor.reconcile(frozenset({0, 1}), frozenset())
    (pop,) = f.running("pop", 1)
    assert isinstance(pop, FencingRole)
    wait_for(lambda: pop.fences_begun == 1 and pop.health.in_fence, 5, "its first fence sent")
    answers: list[bool] = []
    revoke = threading.Thread(
        target=lambda: answers.append(f.conductor.await_released(frozenset({1}), 5))
    )
    revoke.start()
    for _ in range(2):  # the conductor's loop sees the revoke
        f.conductor.reconcile(frozenset({0}), frozenset())
    revoke.join(0.3)
    assert revoke.is_alive() and answers == []  # the fence is still in flight
    pop.may_end_fence.set()
    revoke.join(5)
    assert answers == [True]
    wait_for(lambda: pop.closed, 5, "the pop role ended")
    assert pop.fences_begun == 1
    (other,) = f.running("pop", 0)
    assert isinstance(other, FencingRole) and other.fences_begun == 1  # shard 0 is still led
    other.may_end_fence.set()
    f.conductor.stop()


def test_a_revoke_without_a_fence_in_flight_waits_for_two_reconciles() -> None:
    """The reconcile running when the revoke came may have read the owned shards before it, and
    even started their roles; the next one tells them to go, and `wake` starts it at once."""
    f = Fixture()
    f.conductor.reconcile(frozenset({0, 1}), frozenset())
    wait_for(f.started, 5, "roles started")
    answers: list[bool] = []
    woken = threading.Event()
    revoke = threading.Thread(
        target=lambda: answers.append(f.conductor.await_released(frozenset({1}), 5, wake=woken.set))
    )
    revoke.start()
    f.conductor.reconcile(frozenset({0, 1}), frozenset())  # it read the shards before
    assert woken.wait(5)  # the conductor's loop is to reconcile again now
    revoke.join(0.3)
    assert answers == []
    f.conductor.reconcile(frozenset({0}), frozenset())
    revoke.join(5)
    assert answers == [True]
    f.conductor.stop()


class PopLike(SteppingRole, PopService):
    """A stepping role the conductor takes for a pop service (its `__init__` is the role's)."""

    def wake(self) -> None:  # a stepping role's steps end by themselves
        pass


def test_the_pop_services_are_those_of_the_shards_led_here() -> None:
    f = Fixture(pop_kind=PopLike)
    f.conductor.reconcile(frozenset({0, 1}), frozenset())
    wait_for(f.started, 5, "roles started")
    assert sorted(s.shard for s in f.conductor.pop_services()) == [0, 1]
    f.conductor.reconcile(frozenset({1}), frozenset({0}))  # shard 0 moved away
    assert [s.shard for s in f.conductor.pop_services()] == [1]
    assert f.conductor.pop_service(0) is None
    f.conductor.stop()
