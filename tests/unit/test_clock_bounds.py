"""What the broker-clock samples say (pure logic), and that readers on other threads are safe."""

from __future__ import annotations

import sys
import threading

from foundation.broker_clock import WINDOW, ClockBounds


def test_nothing_measured_means_no_margin() -> None:
    bounds = ClockBounds()
    assert (bounds.measured, bounds.margin_ms, bounds.offset_ms) == (False, 0, 0)


def test_the_tightest_bounds_of_the_window_give_margin_and_offset() -> None:
    bounds = ClockBounds()
    bounds.record(-5, 40)  # local - broker lies in [-5, 40]
    bounds.record(10, 25)
    bounds.record(0, 30)
    assert bounds.measured
    assert bounds.margin_ms == 25  # the smallest upper bound: at most 25 ms ahead
    assert bounds.offset_ms == (10 + 25) // 2


def test_a_clock_behind_the_broker_needs_no_margin() -> None:
    bounds = ClockBounds()
    bounds.record(-80, -60)
    assert bounds.margin_ms == 0
    assert bounds.offset_ms == -70


def test_old_samples_leave_the_window() -> None:
    bounds = ClockBounds()
    bounds.record(0, 5)
    for _ in range(WINDOW):
        bounds.record(90, 100)
    assert bounds.margin_ms == 100  # the tight sample of more than a minute ago is gone


def test_readers_on_other_threads_never_see_the_window_change_under_them() -> None:
    """A delay leader read the margin while the sampler appended: "deque mutated during
    iteration". Switching threads every microsecond made that happen within milliseconds."""
    bounds = ClockBounds()
    bounds.record(0, 10)
    errors: list[BaseException] = []
    stop = threading.Event()

    def read() -> None:
        try:
            while not stop.is_set():
                assert 0 <= bounds.margin_ms <= 10
        except BaseException as error:
            errors.append(error)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(20_000):
            bounds.record(0, 10 - i % 3)
    finally:
        stop.set()
        reader.join()
        sys.setswitchinterval(interval)
    assert errors == []
