"""Python's garbage collector in a long-running worker: startup objects frozen, pauses measured.

A worker imports FastAPI, pydantic and confluent-kafka and builds its app before it serves: some
79k GC-tracked objects that live as long as the process. Every full collection walked all of them
(65-75 ms each on this project's 2-core machine), in whichever
thread happened to allocate, a shard leader's included. `freeze_startup_objects` moves them to
the permanent generation that collections skip, so a collection walks only what the worker made
since.

`GcPauses` measures what the collector still costs: a callback notes each collection's duration
in a plain list, and a periodic round moves them into `kpd_gc_pause_seconds`. The callback must
not observe the histogram itself: in multiprocess mode prometheus_client guards every value with
one process-wide lock, and a collection can start inside any allocation, including one made while
that lock is held.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from prometheus_client import Histogram

from foundation.periodic import PeriodicThread

GC_PAUSE = Histogram(
    "kpd_gc_pause_seconds",
    "How long each garbage collection held the interpreter, by generation",
    ["generation"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
)
GENERATIONS = ("0", "1", "2")


def freeze_startup_objects() -> None:
    gc.collect()  # what startup left as garbage is freed, not kept forever
    gc.freeze()


class GcPauses(PeriodicThread):
    def __init__(self, every_s: float = 1.0) -> None:
        super().__init__("gc-pauses", every_s)
        self._started = 0.0
        self._pauses: list[tuple[int, float]] = []  # (generation, seconds), not yet observed

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        # Runs inside the collector, in the allocating thread: no locks, nothing but a list append.
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self._pauses.append((info["generation"], time.perf_counter() - self._started))

    def start(self) -> None:
        gc.callbacks.append(self._on_collection)
        super().start()

    def stop(self) -> None:
        if self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)
        super().stop()
        self.tick()

    def tick(self) -> None:
        pauses, self._pauses = self._pauses, []  # one swap under the GIL: no append is lost
        for generation, seconds in pauses:
            GC_PAUSE.labels(GENERATIONS[generation]).observe(seconds)
