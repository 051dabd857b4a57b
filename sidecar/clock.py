"""Wall-clock time in epoch milliseconds: the unit of every due time, lease and log record."""

from __future__ import annotations

import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000
