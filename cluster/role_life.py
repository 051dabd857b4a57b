"""The life of one supervised role of a shard in its worker (`cluster.conductor`), in named
phases: leading, handing over, stopping."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from foundation.supervision import Supervisor


class Phase(Enum):
    """Where a role of a shard is in its life here."""

    LEADING = "leading"  # the group gives its shard here
    HANDING_OVER = "handing over"  # its shard moved away: a delay role delivers until fenced
    STOPPING = "stopping"  # asked to stop: it ends after its current step or wait


@dataclass(eq=False)
class RoleLife:
    """One supervised role of one shard. Its phase only moves forward, and it stays in one
    place meanwhile, so readers on other threads (the API's, the group's) always find it."""

    shard: int
    name: str  # "delay" / "pop"
    supervisor: Supervisor
    phase: Phase = Phase.LEADING
    since: float = 0.0  # when it entered its phase (monotonic)
    until: float = 0.0  # HANDING_OVER: stopped then, fenced or not

    def move(self, phase: Phase, until: float = 0.0) -> None:
        self.since, self.until, self.phase = time.monotonic(), until, phase


def in_phase(lives: Iterable[RoleLife] | None, phase: Phase) -> list[RoleLife]:
    return [life for life in lives or () if life.phase is phase]
