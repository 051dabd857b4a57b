"""A model test of the standby's applier (`ScheduleFollower.apply_messages`) against what a
shard's leader can write to the schedules topic.

Each id's records follow one of the histories a leader writes: scheduled; scheduled then
delivered or cancelled; cancelled before its schedule arrived, then booked again under the
schedule's target. The ids' histories interleave in any order. The index holds the records before
a random position. The rest is read in polls of any size, some records possibly removed by
compaction (an earlier record of an id that has a later one): either by the reading that applied
the first ones, or by a new one (a restart) that starts up to `read_again` records before the
position, as one does where a leader noted its position from some of its records only. Whatever
the order, position, polls, compaction and restart, the index ends with each id's latest record
as the topic holds it, a due entry for each id whose latest record is `scheduled`, and the
pending count of those ids. The same holds for a reading that reaches the topic's end at some
point and reads no due key after it (`at_head`), where compaction took only records that had a
later one of their id before that end.
"""

from __future__ import annotations

from pathlib import Path
from tempfile import TemporaryDirectory

import pytest
from confluent_kafka import Message
from hypothesis import given, settings
from hypothesis import strategies as st
from store_helpers import held_stores

from delay_service.schedule_follower import ScheduleFollower
from delay_service.schedules import Schedule, ScheduleIndex, State
from foundation.shards import ShardMap
from foundation.state_follower import stage_by_store

DUE = 1_767_225_600_000
HISTORIES = ("scheduled", "delivered", "cancelled", "cancelled first", "cancelled first, booked")


def history(schedule_id: str, kind: str, n: int) -> list[Schedule]:
    """The records a leader writes for one id, in order."""
    first = Schedule(schedule_id=schedule_id, state=State.SCHEDULED, target="o", due_ms=DUE + n)
    if kind == "scheduled":
        return [first]
    if kind == "delivered":
        return [first, first.settled(State.DELIVERED, DUE + n + 1)]
    if kind == "cancelled":
        return [first, first.settled(State.CANCELLED, DUE - 5, "cancelled")]
    early = Schedule(  # a cancel ahead of its schedule: no target or due time known yet
        schedule_id=schedule_id, state=State.CANCELLED, target="", due_ms=0, at_ms=DUE - 9,
        reason="cancelled",
    )  # fmt: skip
    if kind == "cancelled first":
        return [early]
    return [early, first.settled(State.CANCELLED, DUE - 9, "cancelled")]


@st.composite
def topics(draw: st.DrawFn) -> tuple[list[Schedule], int, list[bool], list[int]]:
    """(records in topic order, their offsets, position, which later records compaction removes,
    poll sizes)."""
    kinds = draw(st.lists(st.sampled_from(HISTORIES), min_size=1, max_size=12))
    pending = {f"id-{n}": history(f"id-{n}", kind, n) for n, kind in enumerate(kinds)}
    turns = draw(st.permutations([sid for sid, records in pending.items() for _ in records]))
    records = [pending[sid].pop(0) for sid in turns]
    position = draw(st.integers(0, len(records)))
    compacted = draw(st.lists(st.booleans(), min_size=len(records), max_size=len(records)))
    polls = draw(st.lists(st.integers(1, 5), min_size=len(records), max_size=len(records)))
    return records, position, compacted, polls


Offset = int  # a record's index in the topic: increasing within each partition


def message(index: ScheduleIndex, offset: Offset, record: Schedule) -> Message:
    partition = index.shards.partition_of_key(record.schedule_id)
    return Message(
        topic="kpd.schedules", partition=partition, offset=offset,
        key=record.schedule_id.encode(), value=record.encode(),
    )  # fmt: skip


def after_compaction(
    records: list[Schedule], compacted: list[bool], start: int, end: int
) -> list[tuple[Offset, Schedule]]:
    """The records from `start` on that compaction left: not those flagged of an id that has a
    later one before `end` (compaction cleans closed segments only, not what was written since)."""
    return [
        (offset, record)
        for offset, (record, gone) in enumerate(zip(records, compacted, strict=True))
        if offset >= start
        and not (
            gone and any(r.schedule_id == record.schedule_id for r in records[offset + 1 : end])
        )
    ]


def apply(follower: ScheduleFollower, read: list[tuple[Offset, Schedule]]) -> None:
    """One poll, staged as a state follower stages it: a batch per shard's store."""
    index, appliers = follower.index, {"kpd.schedules": follower.apply_messages}
    messages = [message(index, *one) for one in read]
    for store, batch in stage_by_store(index.partition_store, appliers, messages).items():
        store.write(batch)


@pytest.mark.parametrize("reaches_head", [False, True])
@settings(max_examples=400, deadline=None)
@given(topics(), st.integers(0, 4), st.data())
def test_the_index_ends_with_each_ids_latest_record(
    reaches_head: bool,
    topic: tuple[list[Schedule], int, list[bool], list[int]],
    read_again: int,
    data: st.DataObject,
) -> None:
    records, position, compacted, polls = topic
    back = data.draw(st.integers(0, min(read_again, position)), "how far a restart starts back")
    with TemporaryDirectory() as folder:
        stores = held_stores(Path(folder), ["schedule", "due"], 2)
        try:
            index = ScheduleIndex(stores, ShardMap(2, 2))
            follower = ScheduleFollower(index, read_again)
            apply(follower, list(enumerate(records[:position])))
            start = position
            if data.draw(st.booleans(), "restart"):
                follower, start = ScheduleFollower(index, read_again), position - back
            # Where the reading reaches the topic's end, as it was when the reading began.
            end = data.draw(st.integers(start, len(records)), "end") if reaches_head else None
            read = after_compaction(records, compacted, start, len(records) if end is None else end)
            sizes = iter([*polls, *[1] * len(records)])  # enough for every record
            while read:
                if end is not None and read[0][0] >= end:
                    follower.at_head = lambda: True
                    end = None
                poll = [r for r in read[: next(sizes)] if end is None or r[0] < end]
                read = read[len(poll) :]
                apply(follower, poll)
            latest = {record.schedule_id: record for record in records}
            for schedule_id, record in latest.items():
                store = index.store(index.shards.of_key(schedule_id))
                assert store.get("schedule", schedule_id.encode()) == record.encode()
            waiting = sorted(
                (r.due_ms, r.schedule_id) for r in latest.values() if r.state is State.SCHEDULED
            )
            due = [entry for shard in (0, 1) for entry in index.due_between(shard, 0, 2**62)]
            assert sorted(due) == waiting
            assert index.count_pending() == len(waiting)
        finally:
            stores.close()
