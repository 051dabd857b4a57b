"""When an idle pop service wakes (`revive.wake_times`): only at a deadline, never on a period."""

from __future__ import annotations

import pytest

from foundation.clock import now_ms
from revive.wake_times import (
    ARRIVAL_RETRY_S,
    FLOOR_EVERY_S,
    PARKED_LOOK_S,
    WakeTimes,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def settled() -> tuple[WakeTimes, Clock]:
    """A service past its first look at the floors, with nothing changed since."""
    clock = Clock()
    wakes = WakeTimes(clock)
    assert wakes.look_at_floors()  # the first step looks at once
    return wakes, clock


def test_an_idle_service_has_no_deadline() -> None:
    wakes, clock = settled()
    assert wakes.wait_s(None, False, False) is None
    clock.now += 3600
    assert not wakes.look_at_floors()
    assert wakes.wait_s(None, False, False) is None


def test_floors_are_looked_at_a_while_after_a_change_and_then_not_again() -> None:
    wakes, clock = settled()
    clock.now += 0.25
    wakes.floors_may_move()
    wakes.floors_may_move()  # a second change does not put the look off
    assert wakes.wait_s(None, False, False) == pytest.approx(FLOOR_EVERY_S - 0.25)
    assert not wakes.look_at_floors()
    clock.now += FLOOR_EVERY_S
    assert wakes.look_at_floors()
    assert not wakes.look_at_floors()
    assert wakes.wait_s(None, False, False) is None


def test_the_soonest_deadline_wins() -> None:
    wakes, clock = settled()
    assert wakes.wait_s(clock.now + 0.7, False, False) == pytest.approx(0.7)
    wakes.expiry_ms = now_ms() + 200
    assert wakes.wait_s(clock.now + 0.7, False, False) == pytest.approx(0.2, abs=0.05)
    wakes.expiry_ms = now_ms() - 5_000  # a lease ended already: at once, never negative
    assert wakes.wait_s(None, False, False) == 0.0


def test_parked_polls_bound_the_wait_and_unhanded_arrivals_bound_it_more() -> None:
    wakes, clock = settled()
    assert wakes.wait_s(None, False, True) == pytest.approx(PARKED_LOOK_S)
    assert wakes.wait_s(None, True, True) == pytest.approx(ARRIVAL_RETRY_S)
    assert wakes.wait_s(clock.now + 10, True, False) == pytest.approx(ARRIVAL_RETRY_S)
