"""The watchdog of supervised loops (docs/principles.md, 7: no silent stall).

It notices a loop that has gone quiet (`foundation.supervision.LoopHealth`): past
`report_after_s` it shows in `kpd_loop_stalled_seconds` and on /readyz; past `give_up_after_s` it
calls `on_stall`, which makes the sidecar give up its leadership and exit: a librdkafka call that
ignores its timeout (librdkafka #5456, `send_offsets_to_transaction`) cannot be interrupted, and
only a fresh process frees what it holds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import structlog

from foundation.metrics import LOOP_STALLED
from foundation.periodic import PeriodicThread
from foundation.supervision import CRASH_LOOP_WINDOW_S, LoopHealth

log = structlog.get_logger(__name__)


class Watchdog(PeriodicThread):
    """Watches every registered loop; see the module docstring."""

    def __init__(
        self,
        report_after_s: float,
        give_up_after_s: float,
        on_stall: Callable[[LoopHealth], None],
        interval_s: float = 1.0,
    ) -> None:
        self.report_after_s, self.give_up_after_s = report_after_s, give_up_after_s
        self._on_stall = on_stall
        super().__init__("watchdog", interval_s, join_s=2)
        self._loops: list[LoopHealth] = []
        self._lock = threading.Lock()
        self._gave_up = False

    def watch(self, health: LoopHealth) -> LoopHealth:
        with self._lock:
            self._loops.append(health)
        return health

    def forget(self, health: LoopHealth) -> None:
        with self._lock:
            if health in self._loops:
                self._loops.remove(health)
        LOOP_STALLED.labels(health.role, str(health.shard)).set(0)

    def problems(self) -> list[str]:
        """Stalled and crash-looping loops, for /readyz."""
        now = time.monotonic()
        found = []
        with self._lock:
            loops = list(self._loops)
        for health in loops:
            quiet = health.quiet_s(now)
            if quiet > self.report_after_s:
                at = f" at {health.record}" if health.current is not None else ""
                found.append(f"{health.name} stalled for {quiet:.1f} s{at}")
            if health.crash_looping(now):
                found.append(
                    f"{health.name} restarted {len(health.restarts)} times within "
                    f"{CRASH_LOOP_WINDOW_S:.0f} s; last: {health.last_failure}"
                )
        return found

    def tick(self) -> None:
        now = time.monotonic()
        with self._lock:
            loops = list(self._loops)
        for health in loops:
            quiet = health.quiet_s(now)
            stalled = max(0.0, quiet - self.report_after_s)
            LOOP_STALLED.labels(health.role, str(health.shard)).set(round(stalled, 3))
            if quiet > self.give_up_after_s and not self._gave_up:
                self._gave_up = True
                log.error(
                    "loop stalled past its bound; giving up", loop=health.name,
                    quiet_s=round(quiet, 1), record=health.record, stack=health.stack(),
                )  # fmt: skip
                self._on_stall(health)
