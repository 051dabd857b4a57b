"""Runs the roles of the shards this worker leads, and the standby that follows the next ones.

For each shard the group assigns here, the standby stops following that shard's partitions and
two supervised roles start: its delay leader and its pop service, each with its own
transactional producer (fencing is per shard and role) and its own restarts, so a failure in one
never rebuilds another. When a shard moves away its pop role stops, and its delay role delivers
on until the new owner, having read the shard's schedules, fences it (a handover; the same when
this worker leaves the group). RocksDB thus has one writer per shard at a time: the standby
leaves the shards of those roles alone. Each role's life here is a `RoleLife` in named phases
(`cluster.role_life`): leading, then handing over (a delay role whose shard moved away) or
stopping at once, then gone once it has ended.

The standby keeps the pop state of only the shards this worker would take over next (the process
chooses them: those of the members it watches, `cluster.ring.guardian`), as Kafka Streams
keeps one standby replica per task: with every worker applying every pop record of the shards it
did not lead, the work grew with the number of workers. A pop role taking over a shard not
followed here replays `kpd.pop-state` from the shard's replay floor (bounded). Schedules are kept
for this worker's share of the shards of other sidecars (`ShardRoles.schedules_kept`), or with
`standby_schedules = "next"` for the followed ones only; a delay role taking over a shard opens
its store where its last holder left it (`delay_service.shard_store`) and reads on from there.
When the standby restarts: `cluster.standby_slot`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import structlog

from cluster.role_life import Phase, RoleLife, in_phase
from cluster.standby_slot import MakeStandby, StandbySlot
from delay_service.schedules import Freshness
from foundation.metrics import IS_LEADER, SHARD_LEADER
from foundation.supervision import LoopHealth, Role, Supervisor
from foundation.watchdog import Watchdog
from revive.service import PopService

log = structlog.get_logger(__name__)

STOP_TIMEOUT_S = 30.0
# How long a shard's old delay role may deliver after the group moved the shard: the new owner's
# reading before its fence, with room (about 60,000 schedule records a second on 2 cores).
HANDOVER_S = 120.0
Make = Callable[[int, LoopHealth], Role]
Shards = frozenset[int]


class Conductor:
    def __init__(
        self,
        watchdog: Watchdog,
        roles: dict[str, Make],  # "delay" / "pop" -> make(shard, health)
        standby: MakeStandby,
        schedules_kept: Callable[[Shards, Shards], Shards],  # (skipped, follow) -> by the standby
        wake: Callable[[], None] = lambda: None,  # a role started or ended: reconcile soon
    ) -> None:
        self._watchdog, self._roles = watchdog, roles
        self._schedules_kept, self._wake = schedules_kept, wake
        # Every role here until it ends, by shard; a shard's tuple is replaced whole, so a
        # reader on another thread sees one or the other.
        self._lives: dict[int, tuple[RoleLife, ...]] = {}
        self._claimed: Shards = frozenset()  # the shards the group last gave this worker
        self._standby = StandbySlot(standby, self._supervise, self._stop)
        self._reconciles = 0  # how many reconciles have ended (`await_released` counts them)

    @property
    def led(self) -> frozenset[int]:
        return frozenset(
            shard for shard, lives in list(self._lives.items()) if in_phase(lives, Phase.LEADING)
        )

    def _in(self, phase: Phase) -> list[RoleLife]:
        """The roles in `phase`, in shard order (the conductor's thread only)."""
        return [
            life for shard in sorted(self._lives) for life in in_phase(self._lives[shard], phase)
        ]

    def wait_s(self) -> float | None:
        """Until the next deadline of a reconcile's own (a handover's end, a stuck role's stop
        given up on, a standby short of stores restarted); None: none. Everything else a
        reconcile acts on wakes it (`wake`, and the caller's own events)."""
        now = time.monotonic()
        deadlines = [life.until for life in self._in(Phase.HANDING_OVER)]
        deadlines += [
            life.since + STOP_TIMEOUT_S
            for life in self._in(Phase.STOPPING)
            if life.shard in self._claimed
        ]
        standby_retry_at = self._standby.retry_at()
        if standby_retry_at is not None:
            deadlines.append(standby_retry_at)
        return max(min(deadlines) - now, 0.0) if deadlines else None

    def reconcile(self, owned: frozenset[int], follow: frozenset[int]) -> None:
        """Make the running roles match the shards this worker is to lead, and the standby the
        shards it is to follow (never one whose schedules a role here writes)."""
        self._claimed = owned
        self._end_handovers()
        for life in self._in(Phase.HANDING_OVER):
            if life.shard in owned:  # moved back: start afresh
                self._retire(life)
        self._forget_stopped()
        for shard in owned ^ self.led:
            SHARD_LEADER.labels(str(shard)).set(int(shard in owned))
        IS_LEADER.set(int(bool(owned)))
        self._hand_over(self.led - owned, time.monotonic() + HANDOVER_S)
        # A shard handed over stays out of the standby until its roles here end (one writer of
        # its schedules in RocksDB): the standby restarts once per move, when the shard is
        # fenced away, not also when it is revoked.
        skips = frozenset(owned | self._lives.keys())
        follow -= skips
        self._standby.run(skips, follow, self._schedules_kept(skips, follow))
        for shard in sorted(owned - self.led):
            if self._still_stopping(shard):
                continue  # its old role must end first: one writer per shard and role
            started = [
                RoleLife(shard, name, self._supervise(name, shard, _bound(make, shard)))
                for name, make in self._roles.items()
            ]
            self._lives[shard] = (*self._lives.get(shard, ()), *started)
            log.info("leading", shard=shard)
        self._reconciles += 1

    def await_released(
        self, shards: Shards, timeout_s: float, wake: Callable[[], object] = lambda: None
    ) -> bool:
        """Called by the group's revoke of `shards` (`Membership`, before this worker rejoins and
        the group can give them to another): wait until a reconcile has seen the revoke, so no
        role of theirs begins a fence any more (`LoopHealth.fencing`), and none is inside one,
        up to `timeout_s` (one `init_transactions`' bound); False if the wait ran out. Kafka
        Streams likewise closes a revoked task before it rejoins. Else an old role's fence sent
        late, a pop role's still starting, could land after the new owner's and fail its first
        commit. Two reconciles: the one running may have read the owned shards before the
        revoke, and may even start their roles;
        `wake` starts the second at once (the conductor's loop waits up to 0.1 s otherwise)."""
        deadline = time.monotonic() + timeout_s
        seen = self._reconciles + 2
        woken = False
        while self._reconciles < seen or any(map(self._in_fence, shards)):
            if not woken and self._reconciles == seen - 1:
                woken = True
                wake()
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)
        return True

    def _in_fence(self, shard: int) -> bool:
        """Is a role of `shard` here, in any phase, inside an `init_transactions`? (Called from
        the group's thread: a shard's roles are one tuple, read once.)"""
        return any(life.supervisor.health.in_fence for life in self._lives.get(shard, ()))

    def leave(self, timeout_s: float, others: Callable[[], bool]) -> None:
        """This worker left the group: its shards' delay roles deliver until their new owners
        fence them, for up to `timeout_s`, or until `others()` says no member is left to take
        them (the workers of a sidecar stop together)."""
        deadline = time.monotonic() + timeout_s
        self._claimed = frozenset()
        self._hand_over(self.led, deadline)
        while self._in(Phase.HANDING_OVER) and time.monotonic() < deadline and others():
            time.sleep(0.05)
            self._end_handovers()

    def stop(self) -> None:
        roles = [life.supervisor for lives in self._lives.values() for life in lives]
        standby = self._standby.detach()
        if standby is not None:
            roles.append(standby)
        self._claimed = frozenset()
        self._lives = {}
        self._stop(*roles)

    def started(self, shard: int) -> bool:
        """Have all roles of this led shard finished starting?"""
        return all(
            life.supervisor.role is not None
            for life in in_phase(self._lives.get(shard), Phase.LEADING)
        )

    def pop_services(self) -> list[PopService]:
        """The started pop services of the shards led here."""
        return [s for s in map(self.pop_service, self.led) if s is not None]

    def pop_service(self, shard: int) -> PopService | None:
        pop = _named("pop", in_phase(self._lives.get(shard), Phase.LEADING))
        role = pop.supervisor.role if pop is not None else None
        return role if isinstance(role, PopService) else None

    def freshness(self, shard: int) -> Freshness:
        """How well this worker's schedule index follows `shard` now. Current where a started
        delay role here writes it (led, or handed over and not fenced yet) or a caught-up
        standby applies it; catching up while the role or standby that will keep it starts, or a
        role released while starting finishes its start (the API waits, as Karapace catches up
        before it acts); else elsewhere: the API asks the shard's owner. (Called from the API's
        thread: reads one reference at a time.)"""
        lives = self._lives.get(shard, ())
        delay = _named("delay", in_phase(lives, Phase.LEADING))
        if delay is not None and delay.supervisor.role is not None:
            return Freshness.CURRENT
        handing_over = _named("delay", in_phase(lives, Phase.HANDING_OVER))
        if handing_over is not None and not handing_over.supervisor.ended:
            started = handing_over.supervisor.role is not None
            return Freshness.CURRENT if started else Freshness.CATCHING_UP
        kept = self._standby.freshness(shard)
        if kept is not None:
            return kept
        return Freshness.CATCHING_UP if shard in self._claimed else Freshness.ELSEWHERE

    def standby_caught_up_once(self) -> bool:
        """(`StandbySlot.caught_up_once`)"""
        return self._standby.caught_up_once()

    def _hand_over(self, shards: frozenset[int], until: float) -> None:
        """Stop leading `shards`: their started delay roles go on until fenced (or `until`), as
        Kafka Streams' warm-up replicas let the old owner serve while the new one catches up:
        a new owner whose index did not follow a shard reads it before it fences (`DelayLeader
        .start`), and the shard delivers meanwhile. Every other role is asked to stop now."""
        for life in self._in(Phase.LEADING):
            if life.shard not in shards:
                continue
            if life.supervisor.release():
                life.move(Phase.HANDING_OVER, until)
            else:
                self._retire(life)
        for shard in sorted(shards):
            handing_over = bool(in_phase(self._lives[shard], Phase.HANDING_OVER))
            log.info("stopped leading", shard=shard, handing_over=handing_over)

    def _end_handovers(self) -> None:
        """Stop the roles the new owner fenced, and those it did not fence in time."""
        now = time.monotonic()
        for life in self._in(Phase.HANDING_OVER):
            fenced = life.supervisor.ended  # read before the stop, which ends it either way
            if fenced or now >= life.until:
                self._retire(life)
                log.info("handover ended", shard=life.shard, fenced=fenced)

    def _retire(self, life: RoleLife) -> None:
        """Ask a role to stop, without waiting: it ends after its current step or wait, and
        `_forget_stopped` lets it go then. A revoked role stuck in a bounded Kafka call (10 s)
        holds up only its own shard, if it comes back, never the start of other shards."""
        life.supervisor.request_stop()
        life.move(Phase.STOPPING)

    def _forget_stopped(self) -> None:
        for life in self._in(Phase.STOPPING):
            if life.supervisor.ended:
                self._watchdog.forget(life.supervisor.health)
                kept = tuple(other for other in self._lives[life.shard] if other is not life)
                if kept:
                    self._lives[life.shard] = kept
                else:
                    del self._lives[life.shard]

    def _still_stopping(self, shard: int) -> bool:
        """Does a former role of `shard` still run, asked to stop less than `STOP_TIMEOUT_S`
        ago? Past that it is stuck in a call that ignores its bound: the shard starts anyway
        (the new role's producer fences the old one), and the watchdog shows the stuck one."""
        now = time.monotonic()
        return any(
            life.phase is Phase.STOPPING and now - life.since < STOP_TIMEOUT_S
            for life in self._lives.get(shard, ())
        )

    def _supervise(self, name: str, shard: int, make: Callable[[LoopHealth], Role]) -> Supervisor:
        supervisor = Supervisor(self._watchdog.watch(LoopHealth(name, shard)), make, self._wake)
        supervisor.start()
        return supervisor

    def _stop(self, *supervisors: Supervisor) -> None:
        """Stop roles together: each ends after its current step or wait, so asking them all
        first makes the stop of a worker's roles take one such wait, not one per role."""
        for supervisor in supervisors:
            supervisor.request_stop()
        for supervisor in supervisors:
            # A role stuck in a Kafka call does not end; the watchdog sees it (it still "runs").
            if supervisor.stop(timeout_s=STOP_TIMEOUT_S):
                self._watchdog.forget(supervisor.health)


def _named(name: str, lives: Iterable[RoleLife]) -> RoleLife | None:
    return next((life for life in lives if life.name == name), None)


def _bound(make: Make, shard: int) -> Callable[[LoopHealth], Role]:
    return lambda health: make(shard, health)
