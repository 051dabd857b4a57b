"""Schedule state records and their index: the msgspec codec, compatible both ways with the
msgpack maps kpd wrote before it (topics and RocksDB indexes of earlier deployments), hostile
values refused, and how records are staged into RocksDB."""

from __future__ import annotations

import gc
from pathlib import Path

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from delay_service.schedules import Schedule, ScheduleIndex, State
from foundation.shards import ShardMap
from foundation.store import Store

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


def test_a_follower_skips_foreign_values_and_applies_the_rest(tmp_path: Path) -> None:
    """The standby's applier: a bad value is skipped, the records around it are applied."""
    store = Store(tmp_path / "db", ["schedule", "due"])
    index = ScheduleIndex(store, ShardMap(2, 2))
    good = Schedule(schedule_id="a", state=State.SCHEDULED, target="o", due_ms=DUE)

    class Record:
        def __init__(self, key: str, value: bytes) -> None:
            self._key, self._value = key.encode(), value

        def key(self) -> bytes:
            return self._key

        def value(self) -> bytes:
            return self._value

        def topic(self) -> str:
            return "kpd.schedules"

        def offset(self) -> int:
            return 0

    done = good.settled(State.DELIVERED, DUE + 1)
    batch = store.batch()
    index.apply_messages(batch, [Record("a", good.encode()), Record("b", b"\xc1")])  # type: ignore[list-item]
    store.write(batch)
    assert index.get("a") == good and index.get("b") is None
    assert index.count_pending() == 1
    batch = store.batch()
    index.apply_messages(batch, [Record("a", done.encode())])  # type: ignore[list-item]
    store.write(batch)
    assert index.get("a") == done and index.count_pending() == 0
    assert list(index.due_between(index.shards.of_key("a"), 0, 2**62)) == []


def test_many_ids_are_read_in_one_call_in_order(tmp_path: Path) -> None:
    """The window slide's multi-get: each id's state where the id was asked, None if unknown."""
    store = Store(tmp_path / "db", ["schedule", "due"])
    index = ScheduleIndex(store, ShardMap(2, 2))
    first = Schedule(schedule_id="a", state=State.SCHEDULED, target="o", due_ms=DUE, value=b"1")
    other = Schedule(schedule_id="c", state=State.SCHEDULED, target="p", due_ms=DUE + 1)
    batch = store.batch()
    index.stage(batch, [first, other])
    store.write(batch)
    assert index.get_many(["c", "nope", "a"]) == [other, None, first]
    assert index.get_many([]) == []


def test_staging_starts_from_states_the_caller_has_read(tmp_path: Path) -> None:
    """A leader's step read each id once; staging its records after the commit trusts that read
    (a second RocksDB read per delivery is what it saves) and still moves only forward."""
    store = Store(tmp_path / "db", ["schedule", "due"])
    index = ScheduleIndex(store, ShardMap(2, 2))
    first = Schedule(schedule_id="a", state=State.SCHEDULED, target="o", due_ms=DUE)
    batch = store.batch()
    index.stage(batch, [first])
    store.write(batch)
    second = Schedule(schedule_id="a", state=State.SCHEDULED, target="other", due_ms=DUE + 9)
    done = first.settled(State.DELIVERED, DUE + 1)
    batch = store.batch()
    assert index.stage(batch, [second, done], found={"a": first}) == [done]
    store.write(batch)
    assert index.get("a") == done and index.count_pending() == 0
    # What the caller found wins over the store: here it says "a" was never seen.
    again = store.batch()
    assert index.stage(again, [first], found={"a": None}) == [first]


def test_schedules_are_invisible_to_the_garbage_collector() -> None:
    """A burst holds thousands of them in its steps: no collection should walk them."""
    decoded = Schedule.decode("a", Schedule(state=State.SCHEDULED, target="o", due_ms=DUE,
                                            headers=(("h", b"1"),)).encode())  # fmt: skip
    assert decoded.headers == (("h", b"1"),)
    assert not gc.is_tracked(decoded)
    assert not gc.is_tracked(decoded.settled(State.DELIVERED, DUE))
