"""Hand memory the process freed back to the system, every few seconds (glibc only).

After a large ingest a worker's RSS stayed near 440 MB while it held 1M pending schedules: most
of it was memory librdkafka, RocksDB and Python had already freed, kept by glibc's allocator in
its arenas for reuse. `malloc_trim(0)` returns those pages to the system: measured, it took the
sidecar from 437 to 248 MB. Other C libraries (musl) give
freed memory back by themselves and have no such call: there this job does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

from foundation.periodic import PeriodicThread

TRIM_EVERY_S = 10.0


def _malloc_trim() -> Callable[[], bool] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: bool(trim(0))


class MemoryTrim(PeriodicThread):
    def __init__(self, every_s: float = TRIM_EVERY_S) -> None:
        super().__init__("memory-trim", every_s)
        self.trim = _malloc_trim()  # None where the C library has no malloc_trim

    def start(self) -> None:
        if self.trim is not None:
            super().start()

    def tick(self) -> None:
        if self.trim is not None:
            self.trim()
