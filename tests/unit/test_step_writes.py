"""A delay step's reads of schedule state: the states a chunk's ids will be looked up for are
read in one multi-get, and `lookup` then answers exactly as it does without that read."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from hypothesis import given, settings
from hypothesis import strategies as st
from store_helpers import held_stores

from delay_service.schedules import Schedule, ScheduleIndex, State
from delay_service.step import Step
from delay_service.window_payloads import WindowPayloads
from delay_service.writes import StepWrites
from foundation.config import Settings
from foundation.producers_in_turn import ProducersInTurn
from foundation.shards import ShardMap

DUE = 1_767_225_600_000
IDS = ["stored", "held", "written", "new", "other"]


def pending(schedule_id: str, target: str = "t") -> Schedule:
    return Schedule(schedule_id=schedule_id, state=State.SCHEDULED, target=target, due_ms=DUE)


def fixture(folder: Path) -> tuple[StepWrites, WindowPayloads]:
    """Shard 0 of 1: "stored" is in the index, "held" in the window (and the index)."""
    index = ScheduleIndex(held_stores(folder, ["schedule", "due"], 1), ShardMap(1, 1))
    store = index.store(0)
    records = [pending("stored"), pending("held")]
    batch = store.batch()
    index.stage(batch, 0, records, [record.encode() for record in records])
    store.write(batch)
    window = WindowPayloads(budget_bytes=1 << 20)
    window.applied([pending("held", target="from the window")], DUE + 1)
    return StepWrites(Settings(), index, 0, window, {}), window


def new_step() -> Step:
    """A step whose "written" id this step has already written."""
    step = Step(ProducersInTurn.of(cast(Any, None)), 1.0, tracked=False)
    step.put(pending("written", target="this step's"), b"")
    return step


def test_prefetch_reads_only_what_neither_the_step_nor_the_window_has(tmp_path: Path) -> None:
    writes, _ = fixture(tmp_path)
    step = new_step()
    writes.prefetch(step, ["stored", "held", "written", "new", "stored", "new"])
    assert step.found == {
        "stored": pending("stored"),
        "held": pending("held", target="from the window"),
        "new": None,
    }
    assert step.index_reads == 2  # "stored" and "new", each once though named twice
    writes.prefetch(step, ["stored", "new"])  # read already: not again
    assert step.index_reads == 2


@settings(max_examples=50, deadline=None)
@given(chunk=st.lists(st.sampled_from(IDS), max_size=8), asked=st.lists(st.sampled_from(IDS)))
def test_lookups_after_a_prefetch_answer_as_without_one(
    tmp_path_factory: Any, chunk: list[str], asked: list[str]
) -> None:
    writes, _ = fixture(tmp_path_factory.mktemp("index"))
    fetched, plain = new_step(), new_step()
    writes.prefetch(fetched, chunk)
    for schedule_id in asked:
        assert writes.lookup(fetched, schedule_id) == writes.lookup(plain, schedule_id)
    read = {sid for sid in chunk + asked if sid in ("stored", "new", "other")}
    assert fetched.index_reads == plain.index_reads + len(read - set(asked)) == len(read)
