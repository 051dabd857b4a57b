"""foundation.clock never runs ahead of the wall clock, whatever pauses come between its reads."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from foundation import clock

EPOCH_NS = 1_796_000_000_000_000_000
MS = 1_000_000


class Clocks:
    """A wall and a monotonic clock on one true time; every read may first wait (the thread
    switched out, for as long as the next pause says)."""

    def __init__(self, pauses: list[int]) -> None:
        self.true_ns = 0
        self._pauses = iter(pauses)

    def _pause(self) -> None:
        self.true_ns += next(self._pauses, 0)

    def wall(self) -> int:
        self._pause()
        return EPOCH_NS + self.true_ns

    def mono(self) -> int:
        self._pause()
        return self.true_ns


# Switched out between the monotonic read and the wall clock's when it anchors again.
@example(pauses=[0, 0, 0, 0, 3 * MS], steps=[1_001 * MS, 0])
@given(
    pauses=st.lists(st.sampled_from([0, 0, 0, 1_000, 200_000, 3 * MS, 20 * MS]), max_size=200),
    steps=st.lists(st.integers(0, 2_000 * MS), min_size=1, max_size=30),
)
def test_now_is_never_ahead_of_the_wall_clock(pauses: list[int], steps: list[int]) -> None:
    clocks = Clocks(pauses)
    saved = clock._wall, clock._mono, clock._anchor
    clock._wall, clock._mono = clocks.wall, clocks.mono
    try:
        clock._anchor = clock._read_anchor()
        for step in steps:  # steps over REANCHOR_NS read the wall clock again
            clocks.true_ns += step
            assert clock.now_ms() <= (EPOCH_NS + clocks.true_ns) // MS
    finally:
        clock._wall, clock._mono, clock._anchor = saved


def test_now_follows_the_wall_clock_within_a_millisecond_without_pauses() -> None:
    assert abs(clock.now_ms() - clock._wall() // MS) <= 1
