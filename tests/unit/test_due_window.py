"""A delay leader's window (`delay_service.due_window`) slides only when a schedule on disk
nears the horizon: with none there it moves along without a read, and an idle leader has no
slide to wake for; what it holds is what an eager window would hold."""

from __future__ import annotations

from pathlib import Path

from store_helpers import held_stores

from delay_service.due_window import SLIDE_MS, WINDOW_MS, DueWindow
from delay_service.schedules import COLUMN_FAMILIES, Schedule, ScheduleIndex, State
from foundation.shards import ShardMap

NOW = 1_767_225_600_000


def on_disk(index: ScheduleIndex, *schedules: tuple[str, int]) -> None:
    """Pending schedules of shard 0 written to its store, as a committed step leaves them."""
    store = index.store(0)
    batch = store.batch()
    records = [Schedule(schedule_id=sid, state=State.SCHEDULED, target="t", due_ms=due)
               for sid, due in schedules]  # fmt: skip
    index.stage(batch, 0, records, [r.encode() for r in records])
    store.write(batch)


class Reads:
    """Counts the index's range reads."""

    def __init__(self, index: ScheduleIndex) -> None:
        self.count, self._scan = 0, index.due_between
        index.due_between = self  # type: ignore[method-assign]

    def __call__(self, *args: int):
        self.count += 1
        return self._scan(*args)


def window(tmp_path: Path) -> tuple[ScheduleIndex, DueWindow]:
    index = ScheduleIndex(held_stores(tmp_path, COLUMN_FAMILIES, 1), ShardMap(1, 1))
    return index, DueWindow(index, 0)


def test_an_empty_window_moves_along_without_reads_and_wakes_nobody(tmp_path: Path) -> None:
    index, due = window(tmp_path)
    due.refill(NOW)
    reads = Reads(index)
    for step in range(1, 50):
        due.refill(NOW + step * 1000)
        assert due.next_slide_ms() is None
    assert reads.count == 0
    assert due.loaded_until == NOW + 49_000 + WINDOW_MS
    due.add("soon", NOW + 49_500)  # ingested inside the window: the wheel has it at once
    assert "soon" in due.wheel


def test_a_far_schedule_is_read_in_when_it_nears_and_not_before(tmp_path: Path) -> None:
    index, due = window(tmp_path)
    on_disk(index, ("far", NOW + 60_000))
    due.refill(NOW)
    assert "far" not in due.wheel
    slide = due.next_slide_ms()
    assert slide == NOW + 60_000 - WINDOW_MS + SLIDE_MS
    reads = Reads(index)
    due.refill(slide - 1)
    assert reads.count == 0 and "far" not in due.wheel
    due.refill(slide)
    assert "far" in due.wheel
    assert due.next_slide_ms() is None  # nothing further on disk


def test_an_ingested_schedule_beyond_the_window_brings_the_slide_forward(tmp_path: Path) -> None:
    index, due = window(tmp_path)
    on_disk(index, ("far", NOW + 60_000))
    due.refill(NOW)
    due.add("nearer", NOW + 30_000)  # beyond the window: on disk once its step commits
    on_disk(index, ("nearer", NOW + 30_000))
    slide = due.next_slide_ms()
    assert slide == NOW + 30_000 - WINDOW_MS + SLIDE_MS
    due.refill(slide)
    assert "nearer" in due.wheel and "far" not in due.wheel
    assert due.next_slide_ms() == NOW + 60_000 - WINDOW_MS + SLIDE_MS
