"""A background job that runs every few seconds until stopped: probes, watchers, samplers.

Each such job (Kafka probe, broker clock, watchdog, shard owners, successor, self-heal) is a
subclass that says what one round does in `tick`; this base owns the daemon thread, the pace and
a stop that never waits forever. A round that takes longer than the period starts the next one at
once; a round that raises is logged and the next round comes as usual, so one bad answer never
ends the job.
"""

from __future__ import annotations

import threading
import time

import structlog

log = structlog.get_logger(__name__)


class PeriodicThread:
    def __init__(self, name: str, every_s: float, join_s: float = 5.0) -> None:
        self._every_s, self._join_s = every_s, join_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def tick(self) -> None:
        """One round of the job; bounded in time (every Kafka or HTTP call in it has a timeout)."""
        raise NotImplementedError

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End the job: at once when called from a round, else after the round in hand."""
        self._stop.set()
        if threading.current_thread() is not self._thread and self._thread.is_alive():
            self._thread.join(timeout=self._join_s)

    def rest(self, seconds: float) -> None:
        """The wait between rounds; a job that watches something meanwhile may end it early."""
        self._stop.wait(seconds)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.tick()
            except Exception:
                log.exception("periodic job failed; trying again next round", job=self._thread.name)
            self.rest(max(0.0, self._every_s - (time.monotonic() - started)))
