"""Time in epoch milliseconds: the unit of every due time, lease and log record.

Between wall-clock reads time advances with the monotonic clock, so timers see time move
smoothly; the wall clock is read again once a second, so drift and corrections are followed
within a second. How far this clock runs ahead of the broker's is `foundation.broker_clock`'s.
"""

from __future__ import annotations

import time

REANCHOR_NS = 1_000_000_000
TIGHT_NS = 100_000  # a pair of reads this close is taken; a thread switch between makes it wider
READS = 5
_wall, _mono = time.time_ns, time.monotonic_ns


def _read_anchor() -> tuple[int, int]:
    """The wall clock and a monotonic reading taken after it. Paired with the later reading,
    the clock this anchors can run behind the wall clock by the gap, never ahead of it: a pair
    whose monotonic reading came first ran ahead by however long the thread was switched out
    between the two (deliveries early by that much for up to a second)."""
    for _ in range(READS):
        before = _mono()
        wall = _wall()
        after = _mono()
        if after - before <= TIGHT_NS:
            break
    return wall, after


_anchor = _read_anchor()  # (wall, monotonic)


def now_ms() -> int:
    global _anchor
    wall, mono = _anchor
    now = _mono()
    if now - mono > REANCHOR_NS:  # benign race: two threads may both re-read the wall clock
        _anchor = wall, mono = _read_anchor()
        return wall // 1_000_000
    return (wall + now - mono) // 1_000_000
