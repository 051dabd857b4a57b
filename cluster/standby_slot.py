"""The one standby a worker's conductor runs (`cluster.standby`), and when it restarts.

It is restarted whenever the shards it is to follow, to keep or to leave alone change: a standby
may follow shards now led here, and must stop writing them. One that found a store it is to keep
still held by another worker of the sidecar restarts after `STANDBY_RETRY_S` to take it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple, cast

from cluster.standby import Shards, Standby
from delay_service.schedules import Freshness
from foundation.metrics import SHARD_STANDBY
from foundation.supervision import LoopHealth, Role, Supervisor

STANDBY = -1  # the standby's "shard" in metrics and logs: it serves all the others
STANDBY_RETRY_S = 2.0  # a standby short of stores another worker held restarts this often
# (skipped, follow, keeps, health) -> the standby
MakeStandby = Callable[[Shards, Shards, Shards, LoopHealth], Standby]
# (name, shard, make) -> a started supervisor of the role `make` builds
Supervise = Callable[[str, int, Callable[[LoopHealth], Role]], Supervisor]


class RunningStandby(NamedTuple):
    supervisor: Supervisor
    follows: Shards  # the shards whose pop state it keeps
    keeps: Shards  # the shards whose schedules it applies to the index
    skips: Shards  # the shards whose schedules it leaves to roles here (led or handing over)


class StandbySlot:
    def __init__(
        self, make: MakeStandby, supervise: Supervise, stop: Callable[[Supervisor], None]
    ) -> None:
        self._make, self._supervise, self._stop = make, supervise, stop
        # Replaced as one, for readers on other threads.
        self._running: RunningStandby | None = None
        self._caught_up_once = False

    def run(self, skips: Shards, follow: Shards, keeps: Shards) -> None:
        """Have a standby follow `follow`, keep `keeps` and leave `skips` alone: the one running
        if it does and is not short of stores, else a new one."""
        running = self._running
        if (
            running is not None
            and (follow, keeps, skips) == (running.follows, running.keeps, running.skips)
            and not self._short_of_stores()
        ):
            return
        followed = running.follows if running is not None else frozenset()
        for shard in follow ^ followed:
            SHARD_STANDBY.labels(str(shard)).set(int(shard in follow))
        self.stop()  # it may follow shards now led here: it must stop writing them
        supervisor = self._supervise(
            "standby", STANDBY, lambda health: self._make(skips, follow, keeps, health)
        )
        self._running = RunningStandby(supervisor, follow, keeps, skips)

    def retry_at(self) -> float | None:
        """When (monotonic) the standby restarts to take the stores another worker held at its
        start; None while it has not caught up, or holds every store it is to keep."""
        running = self._running
        role = cast(Standby | None, running.supervisor.role) if running is not None else None
        if role is None or role.kept == role.wanted:
            return None
        return role.started_at + STANDBY_RETRY_S

    def freshness(self, shard: int) -> Freshness | None:
        """How the standby's index follows `shard`: catching up until it has caught up, then
        current if it holds the shard's store; None where it does not keep the shard. (Called
        from the API's thread: reads one reference at a time.)"""
        running = self._running
        if running is None or shard not in running.keeps:
            return None
        role = running.supervisor.role  # None until caught up
        if role is None:
            return Freshness.CATCHING_UP
        if shard in cast(Standby, role).kept:  # its store was free at the start
            return Freshness.CURRENT
        return None

    def caught_up_once(self) -> bool:
        """Has a standby caught up since this worker started? (Remembered once seen.) One
        restarted for a new set of shards to follow catches up while the worker serves on: not a
        reason to be unready."""
        running = self._running
        if running is not None and running.supervisor.role is not None:
            self._caught_up_once = True
        return self._caught_up_once

    def stop(self) -> None:
        supervisor = self.detach()
        if supervisor is not None:
            self._stop(supervisor)

    def detach(self) -> Supervisor | None:
        """Let the standby go without stopping it: the caller stops it with its other roles."""
        running, self._running = self._running, None
        return running.supervisor if running is not None else None

    def _short_of_stores(self) -> bool:
        """Has the standby run a while without some of the stores it is to keep (another worker
        of this sidecar held them at its start)? Restarted then, it takes them."""
        retry_at = self.retry_at()
        return retry_at is not None and time.monotonic() >= retry_at
