"""Schedule state records and their index: the msgspec codec, compatible both ways with the
msgpack maps kpd wrote before it (topics and RocksDB indexes of earlier deployments), hostile
values refused, and how records are staged into RocksDB."""

from __future__ import annotations

import gc
from collections.abc import Sequence
from pathlib import Path

import msgpack
import pytest
from confluent_kafka import Message
from hypothesis import given
from hypothesis import strategies as st
from store_helpers import held_stores

from delay_service.schedule_follower import ScheduleFollower
from delay_service.schedules import Schedule, ScheduleIndex, State
from foundation.shards import ShardMap
from foundation.state_follower import stage_by_store
from foundation.store import Batch

DUE = 1_767_225_600_000


def old_encode(body: dict[str, object]) -> bytes:
    """How the earlier code (msgpack, 2026-11-24 and before) wrote a value."""
    return msgpack.packb(body, use_bin_type=True)


def old_decode(data: bytes) -> dict[str, object]:
    """The fields the earlier code read, with its defaults (a reader during a rolling upgrade)."""
    body = msgpack.unpackb(data, raw=False)
    return {
        "state": body["s"],
        "target": body["t"],
        "due_ms": body["d"],
        "key": body.get("k"),
        "value": body.get("v"),
        "headers": [(str(n), None if v is None else bytes(v)) for n, v in body.get("h") or []],
        "enqueued_ms": body.get("e", 0),
        "at_ms": body.get("a"),
        "reason": body.get("r"),
    }


def test_values_written_by_the_earlier_code_decode_the_same() -> None:
    scheduled = old_encode(
        {"s": "scheduled", "t": "orders", "d": DUE, "e": DUE - 5, "k": b"k", "v": b"\x00v",
         "h": [["trace", b"1"], ["empty", None]]}
    )  # fmt: skip
    assert Schedule.decode("a", scheduled) == Schedule(
        schedule_id="a", state=State.SCHEDULED, target="orders", due_ms=DUE, key=b"k",
        value=b"\x00v", headers=(("trace", b"1"), ("empty", None)), enqueued_ms=DUE - 5,
    )  # fmt: skip
    delivered = old_encode(
        {"s": "delivered", "t": "orders", "d": DUE, "e": 0, "a": DUE + 3, "r": None}
    )
    got = Schedule.decode("a", delivered)
    assert (got.state, got.at_ms, got.reason, got.key, got.headers) == (
        State.DELIVERED, DUE + 3, None, None, ()
    )  # fmt: skip
    # The oldest values had no enqueued time.
    assert Schedule.decode("b", old_encode({"s": "cancelled", "t": "", "d": 0})).enqueued_ms == 0


headers = st.lists(
    st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3
).map(tuple)
schedules = st.builds(
    Schedule,
    schedule_id=st.text(min_size=1, max_size=20),
    state=st.sampled_from(State),
    target=st.text(max_size=20),
    due_ms=st.integers(0, 2**63 - 1),
    key=st.none() | st.binary(max_size=16),
    value=st.none() | st.binary(max_size=64),
    headers=headers,
    enqueued_ms=st.integers(0, 2**63 - 1),
    at_ms=st.none() | st.integers(0, 2**63 - 1),
    reason=st.none() | st.text(max_size=20),
)


@given(schedules)
def test_round_trip_and_readable_by_the_earlier_code(schedule: Schedule) -> None:
    data = schedule.encode()
    assert Schedule.decode(schedule.schedule_id, data) == schedule
    assert old_decode(data) == {
        "state": str(schedule.state), "target": schedule.target, "due_ms": schedule.due_ms,
        "key": schedule.key, "value": schedule.value, "headers": list(schedule.headers),
        "enqueued_ms": schedule.enqueued_ms, "at_ms": schedule.at_ms, "reason": schedule.reason,
    }  # fmt: skip
    assert "i" not in msgpack.unpackb(data, raw=False)  # the id is the record's key, not stored


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc1",  # never used in msgpack
        b"not msgpack at all",
        old_encode(["scheduled", "orders", DUE]),  # an array, not a map
        old_encode({"t": "orders", "d": DUE}),  # no state
        old_encode({"s": "lost", "t": "orders", "d": DUE}),  # unknown state
        old_encode({"s": "scheduled", "t": "orders", "d": "tomorrow"}),
        old_encode({"s": "scheduled", "t": "orders", "d": 1.5}),
        old_encode({"s": "scheduled", "t": 7, "d": DUE}),
        old_encode({"s": "scheduled", "t": "o", "d": DUE, "h": [["x", b"1", b"extra"]]}),
        old_encode({"s": "scheduled", "t": "o", "d": DUE, "h": "not a list"}),
        old_encode({"s": "scheduled", "t": "o", "d": DUE, "v": "text, not bytes"}),
        old_encode({"s": "scheduled", "t": "o", "d": DUE})[:-3],  # truncated
    ],
)
def test_values_kpd_did_not_write_are_refused(data: bytes) -> None:
    with pytest.raises(ValueError):
        Schedule.decode("x", data)


def test_an_id_inside_a_value_never_replaces_the_records_key() -> None:
    data = old_encode({"i": "someone-else", "s": "scheduled", "t": "o", "d": DUE})
    assert Schedule.decode("mine", data).schedule_id == "mine"


def state_message(schedule_id: str | None, value: bytes, partition: int) -> Message:
    """A record of the schedules topic, as the state follower's consumer hands it over."""
    key = None if schedule_id is None else schedule_id.encode()
    return Message(topic="kpd.schedules", partition=partition, offset=0, key=key, value=value)


def new_index(
    folder: Path, shards: ShardMap, kind: type[ScheduleIndex] = ScheduleIndex
) -> ScheduleIndex:
    return kind(held_stores(folder, ["schedule", "due"], shards.shards), shards)


def follow(index: ScheduleIndex, follower: ScheduleFollower, messages: list[Message]) -> None:
    """Apply `messages` as a state follower's poll does: a batch per shard's store."""
    appliers = {"kpd.schedules": follower.apply_messages}
    for store, batch in stage_by_store(index.partition_store, appliers, messages).items():
        store.write(batch)


def of_shard(index: ScheduleIndex, schedule: Schedule) -> Message:
    """`schedule` in the partition kpd writes it to (Kafka's partitioner on its id)."""
    partition = index.shards.partition_of_key(schedule.schedule_id)
    return state_message(schedule.schedule_id, schedule.encode(), partition)


def stage_all(
    index: ScheduleIndex, batch: Batch, records: list[Schedule], **found: object
) -> list[Schedule]:
    """Stage records of one shard, encoded as a leader's step has them."""
    shard = index.shards.of_key(records[0].schedule_id)
    encoded = [record.encode() for record in records]
    return index.stage(batch, shard, records, encoded, found or None)  # type: ignore[arg-type]


def test_a_follower_skips_foreign_values_and_applies_the_rest(tmp_path: Path) -> None:
    """The standby's applier: a bad value or a record without a key is skipped, the records
    around them are applied."""
    index = new_index(tmp_path, ShardMap(2, 2))
    follower = ScheduleFollower(index)
    good = Schedule(schedule_id="a", state=State.SCHEDULED, target="o", due_ms=DUE)
    done = good.settled(State.DELIVERED, DUE + 1)
    bad = [state_message("b", b"\xc1", 0), state_message(None, good.encode(), 1)]
    follow(index, follower, [*bad, of_shard(index, good)])
    assert index.find("a") == good and index.find("b") is None
    assert index.count_pending() == 1
    follow(index, follower, [of_shard(index, done)])
    assert index.find("a") == done and index.count_pending() == 0
    assert list(index.due_between(index.shards.of_key("a"), 0, 2**62)) == []


def test_a_follower_books_each_record_under_its_partitions_shard(tmp_path: Path) -> None:
    """A record's shard is its partition's: pending counts and due keys follow it, and records of
    several shards in one poll are each counted where they belong."""
    index = new_index(tmp_path, ShardMap(2, 4))
    records = [
        Schedule(schedule_id=f"id-{n}", state=State.SCHEDULED, target="o", due_ms=DUE + n)
        for n in range(40)
    ]
    follow(index, ScheduleFollower(index), [of_shard(index, record) for record in records])
    for shard in (0, 1):
        mine = [r for r in records if index.shards.of_key(r.schedule_id) == shard]
        assert 0 < len(mine) < len(records)
        assert index.count_pending(shard) == len(mine)
        assert all(index.get(shard, r.schedule_id) == r for r in mine)
        assert all(index.get(1 - shard, r.schedule_id) is None for r in mine)  # its store only
        due = list(index.due_between(shard, 0, 2**62))
        assert due == [(r.due_ms, r.schedule_id) for r in mine]


def test_a_follower_stores_a_value_as_the_topic_holds_it(tmp_path: Path) -> None:
    """The index keeps the topic's bytes, not a re-encoding: a field a newer kpd added to a
    record stays in the index for the kpd that can read it."""
    index = new_index(tmp_path, ShardMap(1, 1))
    value = old_encode({"s": "scheduled", "t": "o", "d": DUE, "zz": "from a newer kpd"})
    follow(index, ScheduleFollower(index), [state_message("a", value, 0)])
    assert index.store(0).get("schedule", b"a") == value
    assert index.find("a") == Schedule(
        schedule_id="a", state=State.SCHEDULED, target="o", due_ms=DUE
    )


def test_many_ids_are_read_in_one_call_in_order(tmp_path: Path) -> None:
    """The window slide's multi-get: each id's state where the id was asked, None if unknown."""
    index = new_index(tmp_path, ShardMap(1, 1))
    store = index.store(0)
    first = Schedule(schedule_id="a", state=State.SCHEDULED, target="o", due_ms=DUE, value=b"1")
    other = Schedule(schedule_id="c", state=State.SCHEDULED, target="p", due_ms=DUE + 1)
    batch = store.batch()
    stage_all(index, batch, [first, other])
    store.write(batch)
    assert index.get_many(0, ["c", "nope", "a"]) == [other, None, first]
    assert index.get_many(0, []) == []


def test_staging_starts_from_states_the_caller_has_read(tmp_path: Path) -> None:
    """A leader's step read each id once; staging its records after the commit trusts that read
    (a second RocksDB read per delivery is what it saves) and still moves only forward."""
    index = new_index(tmp_path, ShardMap(2, 2))
    store = index.store(index.shards.of_key("a"))
    first = Schedule(schedule_id="a", state=State.SCHEDULED, target="o", due_ms=DUE)
    batch = store.batch()
    stage_all(index, batch, [first])
    store.write(batch)
    second = Schedule(schedule_id="a", state=State.SCHEDULED, target="other", due_ms=DUE + 9)
    done = first.settled(State.DELIVERED, DUE + 1)
    batch = store.batch()
    assert stage_all(index, batch, [second, done], a=first) == [done]
    store.write(batch)
    assert index.find("a") == done and index.count_pending() == 0
    # What the caller found wins over the store: here it says "a" was never seen.
    again = store.batch()
    assert stage_all(index, again, [first], a=None) == [first]


def test_schedules_are_invisible_to_the_garbage_collector() -> None:
    """A burst holds thousands of them in its steps: no collection should walk them."""
    decoded = Schedule.decode("a", Schedule(state=State.SCHEDULED, target="o", due_ms=DUE,
                                            headers=(("h", b"1"),)).encode())  # fmt: skip
    assert decoded.headers == (("h", b"1"),)
    assert not gc.is_tracked(decoded)
    assert not gc.is_tracked(decoded.settled(State.DELIVERED, DUE))


class DueKeyReads(ScheduleIndex):
    """An index that counts the due keys its followers read."""

    reads: list[int]

    def pending_at(self, shard: int, entries: Sequence[tuple[int, str]]) -> list[bool]:
        self.reads.append(len(entries))
        return super().pending_at(shard, entries)


def test_a_follower_at_the_head_reads_no_due_key_for_a_delivered_record(tmp_path: Path) -> None:
    """A standby's reading, once caught up, takes a delivered id as pending without reading its
    due key (`ScheduleFollower._states_before`); before that, it reads them."""
    index = new_index(tmp_path, ShardMap(1, 1), DueKeyReads)
    assert isinstance(index, DueKeyReads)
    index.reads = []
    records = [
        Schedule(schedule_id=f"id-{n}", state=State.SCHEDULED, target="o", due_ms=DUE + n)
        for n in range(4)
    ]
    follower = ScheduleFollower(index, read_again=0)
    for record in records:
        apply_one(index, follower, record)
    done = [record.settled(State.DELIVERED, DUE + 9) for record in records]
    apply_one(index, follower, done[0])
    assert index.reads == [1] and index.count_pending() == 3
    follower.at_head = lambda: True
    for record in done[1:]:
        apply_one(index, follower, record)
    assert index.reads == [1]  # none since
    assert index.count_pending() == 0 and list(index.due_between(0, 0, 2**62)) == []
    assert [index.find(record.schedule_id) for record in records] == done


def apply_one(index: ScheduleIndex, follower: ScheduleFollower, record: Schedule) -> None:
    follow(index, follower, [state_message(record.schedule_id, record.encode(), 0)])


def test_a_follower_at_the_head_counts_a_delivery_repeated_in_one_poll_once(
    tmp_path: Path,
) -> None:
    """The head's fast path (`ScheduleIndex.stage_followed`) writes without looking up states:
    a `delivered` record of an id met twice in one poll, which no leader writes but a foreign
    writer could, still leaves the pending count as `stage` would."""
    index = new_index(tmp_path, ShardMap(1, 1))
    follower = ScheduleFollower(index, read_again=0)
    follower.at_head = lambda: True
    first = Schedule(schedule_id="a", state=State.SCHEDULED, target="o", due_ms=DUE)
    other = Schedule(schedule_id="b", state=State.SCHEDULED, target="o", due_ms=DUE + 1)
    done = first.settled(State.DELIVERED, DUE + 9)
    polls = [[first], [other, done, done]]
    for poll in polls:
        follow(index, follower, [state_message(r.schedule_id, r.encode(), 0) for r in poll])
    assert index.count_pending() == 1
    assert list(index.due_between(0, 0, 2**62)) == [(DUE + 1, "b")]
    assert index.find("a") == done
