"""Time in epoch milliseconds: the unit of every due time, lease and log record.

Between wall-clock reads time advances with the monotonic clock, so timers see time move
smoothly; the wall clock is read again once a second, so drift and corrections are followed
within a second. How far this clock runs ahead of the broker's is `foundation.broker_clock`'s.
"""

from __future__ import annotations

import time

REANCHOR_NS = 1_000_000_000
_anchor = (time.time_ns(), time.monotonic_ns())  # (wall, monotonic) read together


def now_ms() -> int:
    global _anchor
    wall, mono = _anchor
    now = time.monotonic_ns()
    if now - mono > REANCHOR_NS:  # benign race: two threads may both re-read the wall clock
        _anchor = wall, mono = time.time_ns(), now
    return (wall + now - mono) // 1_000_000
