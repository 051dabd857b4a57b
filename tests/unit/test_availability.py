"""Which parked long polls an arrival wakes: one pop on its turn (the longest parked), every
peer's watch, and the turn passed on by a woken pop that leaves without a look."""

from __future__ import annotations

import asyncio
from contextlib import ExitStack

import pytest

from cluster.routing.availability import Availability

KEY = ("g", "orders")


def parked(
    availability: Availability, stack: ExitStack, polls: int, watches: int = 0
) -> tuple[list[asyncio.Event], list[asyncio.Event]]:
    """Events of `polls` pops, then `watches` watches, parked on KEY in that order."""
    pops = [stack.enter_context(availability.waiting(*KEY)) for _ in range(polls)]
    seen = [stack.enter_context(availability.waiting(*KEY, every=True)) for _ in range(watches)]
    return pops, seen


def test_an_arrival_wakes_the_longest_parked_pop_and_every_watch() -> None:
    availability = Availability()
    with ExitStack() as stack:
        pops, watches = parked(availability, stack, polls=3, watches=2)
        availability._wake(KEY)
        assert [e.is_set() for e in pops] == [True, False, False]
        assert all(e.is_set() for e in watches)
        availability._wake(KEY)  # a second arrival: the next pop, not the woken one again
        assert [e.is_set() for e in pops] == [True, True, False]
        availability.pass_on(*KEY)
        assert [e.is_set() for e in pops] == [True, True, True]
        availability.pass_on(*KEY)  # nobody left to wake: nothing happens
    assert not availability.awaited()


def test_a_pop_parked_later_waits_behind_those_parked_before() -> None:
    availability = Availability()
    with ExitStack() as stack:
        first = stack.enter_context(availability.waiting(*KEY))
        with availability.waiting(*KEY) as second:
            pass  # left before any arrival: it is no longer in line
        third = stack.enter_context(availability.waiting(*KEY))
        availability._wake(KEY)
        availability._wake(KEY)
        assert (first.is_set(), second.is_set(), third.is_set()) == (True, False, True)


def test_a_woken_pop_that_fails_before_its_look_passes_its_turn_on() -> None:
    availability = Availability()
    with ExitStack() as stack:
        (waiting,), _ = parked(availability, stack, polls=1)
        with pytest.raises(asyncio.CancelledError), availability.waiting(*KEY) as woken:
            availability._wake(KEY)  # wakes the first; a second arrival wakes this one
            availability._wake(KEY)
            assert woken.is_set()
            other = stack.enter_context(availability.waiting(*KEY))
            raise asyncio.CancelledError  # the client went away before the pop looked
        assert waiting.is_set() and other.is_set()


def test_a_pop_that_leaves_unwoken_passes_nothing_on() -> None:
    availability = Availability()
    with ExitStack() as stack:
        (waiting,), _ = parked(availability, stack, polls=1)
        with pytest.raises(asyncio.CancelledError), availability.waiting(*KEY):
            raise asyncio.CancelledError
        assert not waiting.is_set()
