"""OrderedLanes: the records of lanes ordered by key, kept until their message is done."""

from __future__ import annotations

from kpd_core import Origin, Provenance

from revive.key_lane import KeyLane
from revive.ordered_lanes import OrderedLanes
from revive.source_record import SourceRecord

KEY = ("orders", 0)


def fetched(offset: int, key: bytes | None) -> tuple[SourceRecord, Provenance]:
    record = SourceRecord("orders", 0, offset, key, b"v%d" % offset, (), 1_000)
    return record, Provenance(Origin.here(record), 0)


def lanes() -> tuple[OrderedLanes, KeyLane]:
    lane = KeyLane()
    return OrderedLanes(lambda _: lane), lane


def lease(lane: KeyLane, checkpoint_id: int, taken: list) -> None:
    offsets = [record.offset for record, _ in taken]
    counts = [found.previous_deliveries + 1 for _, found in taken]
    lane.open_checkpoint(checkpoint_id, offsets, counts, 10_000)


def test_records_are_kept_until_done_and_a_released_one_is_handed_out_again() -> None:
    ordered, lane = lanes()
    assert ordered.add(KEY, [fetched(0, b"a"), fetched(1, b"a"), fetched(2, None)]) == 3
    assert ordered.count_ready(0) == {"orders"} and ordered.ready[KEY] == 2
    taken = ordered.take(KEY, 10, 0)
    assert [record.offset for record, _ in taken] == [0, 2]
    lease(lane, 1, taken)
    assert ordered.count_ready(0) == set() and ordered.ready[KEY] == 0
    assert lane.release(1, 0, available_at_ms=50) == "ok"
    assert lane.ack(1, 2, 0) == "acked"
    assert ordered.drop_done(KEY) == 1  # offset 2's record goes; 0 comes again
    assert ordered.count_ready(49) == set()
    assert ordered.count_ready(50) == {"orders"}
    (again,) = ordered.take(KEY, 10, 50)
    assert (again[0].offset, again[1].previous_deliveries) == (0, 1)  # its second delivery
    assert again[1].origin.offset == 0


def test_records_done_before_a_restart_are_not_kept() -> None:
    ordered, lane = lanes()
    lane.open_checkpoint(1, [5, 6], [1, 1], 10_000)  # replayed
    assert lane.ack(1, 5, 0) == "acked"
    ordered.start(KEY, 5)  # the group committed 5
    assert ordered.add(KEY, [fetched(5, b"a"), fetched(6, b"b"), fetched(7, b"a")]) == 2
    assert [r.offset for r, _ in ordered.take(KEY, 10, 0)] == [7]  # 6 is still leased
    assert ordered.reposition(KEY) == 2  # a seek: nothing kept
    assert ordered.take(KEY, 10, 0) == []


def test_a_pop_of_a_topic_takes_from_its_lanes_in_turn_and_counts_only_theirs() -> None:
    made: dict[tuple[str, int], KeyLane] = {}
    ordered = OrderedLanes(lambda key: made.setdefault(key, KeyLane()))
    ordered.add(KEY, [fetched(0, b"a"), fetched(1, b"b")])
    ordered.add(("orders", 1), [fetched(5, b"c")])
    ordered.add(("other", 0), [fetched(7, None)])
    ordered.count_ready(0)
    assert (ordered.ready_for("orders"), ordered.ready_for("other")) == (3, 1)
    first_two = ordered.take_for("orders", 2, 0)
    assert [(key, r.offset) for key, (r, _) in first_two] == [(KEY, 0), (KEY, 1)]
    assert [r.offset for _, (r, _) in ordered.take_for("orders", 10, 0)] == [0, 1, 5]
    ordered.forget_topics({"orders"})  # deleted: nothing of its lanes is kept
    assert ordered.lanes() == [("other", 0)] and ordered.ready_for("orders") == 0
