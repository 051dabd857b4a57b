"""Startup objects leave the collector's reach; every collection's pause reaches the histogram."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from foundation.garbage_collection import GC_PAUSE, GcPauses, freeze_startup_objects


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only a collection can free it


def collections_counted(generation: str) -> float:
    return sum(
        sample.value
        for metric in GC_PAUSE.collect()
        for sample in metric.samples
        if sample.name.endswith("_count") and sample.labels["generation"] == generation
    )


@pytest.fixture
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()  # the rest of the test run collects as usual


def test_objects_alive_at_startup_are_frozen_and_later_ones_are_collected(unfrozen) -> None:
    startup, garbage = Node(), weakref.ref(Node())
    freeze_startup_objects()
    assert garbage() is None  # garbage at startup is freed, not frozen forever
    assert gc.get_freeze_count() > 1000  # this process's modules, classes and functions
    tracked = {id(o) for o in gc.get_objects()}
    assert id(startup) not in tracked
    later = Node()
    assert id(later) in {id(o) for o in gc.get_objects()}
    later_ref = weakref.ref(later)
    del later
    gc.collect()
    assert later_ref() is None  # a cycle made after startup is still the collector's to free


def test_each_collection_is_observed_by_generation() -> None:
    pauses = GcPauses(every_s=3600)  # rounds run by hand here
    full_before, young_before = collections_counted("2"), collections_counted("0")
    pauses.start()
    try:
        gc.collect()
        gc.collect(0)
        assert collections_counted("2") == full_before  # noted, not yet observed
        pauses.tick()
        assert collections_counted("2") == full_before + 1
        assert collections_counted("0") >= young_before + 1
    finally:
        pauses.stop()
    gc.collect()
    pauses.tick()
    assert collections_counted("2") == full_before + 1  # stopped: no longer noted
