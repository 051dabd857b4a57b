"""The replay floor (`PopState.floors`): which pop-state records a new leader still needs."""

from __future__ import annotations

from foundation.clock import now_ms
from foundation.shards import ShardMap
from revive.answered_calls import WINDOW_MS
from revive.key_lane import KeyLane
from revive.ledger import Outcome
from revive.pop_state import LedgerKey, PopState
from revive.records import AckRecord, AnswerRecord, CheckpointRecord, ForgetRecord, SeekRecord

ORDERS: LedgerKey = ("g", "orders", 0)
PAYMENTS: LedgerKey = ("g", "payments", 0)


def leased(key: LedgerKey, checkpoint_id: int, offsets: range) -> CheckpointRecord:
    return CheckpointRecord(*key, checkpoint_id, tuple(offsets), (1,) * len(offsets), 60_000, 1_000)


def settled(key: LedgerKey, checkpoint_id: int, offsets: range) -> list[AckRecord]:
    return [AckRecord(*key, checkpoint_id, o, Outcome.REQUEUED, 2_000) for o in offsets]


def state_with(*records: tuple[int, list]) -> PopState:
    """A state that read `records`, (offset in pop-state partition 0, state records) each."""
    state = PopState(ShardMap(1, 1))
    state.replay([(0, offset, batch) for offset, batch in records])
    return state


def test_a_settled_checkpoint_keeps_the_floor_until_the_group_commits_past_it() -> None:
    # Checkpoint at offset 5 leases 10..14; every lease ends (revived) in the record at 6.
    state = state_with(
        (5, [leased(ORDERS, 1, range(10, 15))]), (6, settled(ORDERS, 1, range(10, 15)))
    )
    assert state.floors([0], lambda _: -1) == {0: 5}, "nothing committed: a new leader needs it"
    assert state.floors([0], lambda _: 14) == {0: 5}, "offset 14 is not committed yet"
    assert state.floors([0], lambda _: 15) == {0: 7}, "committed past it: every record read"
    assert state.floors([0], lambda _: -1) == {0: 7}, "a released checkpoint stays released"


def test_a_live_checkpoint_keeps_the_floor_and_ledgers_release_independently() -> None:
    state = state_with(
        (3, [leased(ORDERS, 1, range(0, 4))]),
        (4, [leased(PAYMENTS, 2, range(0, 2))]),
        (8, settled(ORDERS, 1, range(0, 4))),
    )
    marks = {ORDERS: 4, PAYMENTS: 0}  # payments 0..1 leased, not settled: nothing committed
    assert state.floors([0], marks.__getitem__) == {0: 4}
    marks[PAYMENTS] = 2
    assert state.floors([0], marks.__getitem__) == {0: 9}


def test_live_writes_count_like_replayed_records() -> None:
    state = PopState(ShardMap(1, 1))
    record = leased(ORDERS, 7, range(20, 30))
    state.apply(record)
    state.wrote(ORDERS, ([(record.checkpoint_id, record.offsets[-1])], []), 0, 41)
    assert state.floors([0], lambda _: 29) == {0: 41}
    assert state.floors([0], lambda _: 30) == {0: 42}


def test_a_standby_forgets_only_what_lies_below_its_leaders_floors() -> None:
    state = state_with(
        (3, [leased(ORDERS, 1, range(0, 4))]),
        (9, [leased(PAYMENTS, 2, range(0, 2))]),
    )
    assert state.forget_below({}) == 2, "no committed floor yet: every place is kept"
    assert state.forget_below({0: 9}) == 1
    assert state.floors([0], lambda _: -1) == {0: 9}, "the one left still keeps the floor"


def test_a_floor_never_falls_back_below_what_a_new_leader_skipped() -> None:
    """A new leader that replayed nothing above its predecessor's floor (all settled) keeps that
    floor: committing 0 would make the leader after it replay the whole partition."""
    state = PopState(ShardMap(1, 2))
    state.read_up_to({0: 1_000, 1: 0})
    assert state.floors([0, 1], lambda _: -1) == {0: 1_000, 1: 0}


def test_a_forgotten_groups_checkpoints_no_longer_hold_the_floor() -> None:
    # A lease of a deleted group never settles: only its forgetting lets the floor pass it.
    state = state_with(
        (2, [leased(ORDERS, 1, range(0, 5))]), (3, [leased(PAYMENTS, 2, range(0, 1))])
    )
    assert state.floors([0], lambda _: -1) == {0: 2}
    state.replay([(0, 9, [ForgetRecord(*ORDERS, 3_000)])])
    assert set(state.ledgers) == {PAYMENTS}
    assert state.floors([0], lambda _: -1) == {0: 3}


def test_a_seek_goes_on_from_its_offset_with_or_without_a_ledger() -> None:
    state = state_with((1, [leased(ORDERS, 1, range(50, 60))]), (2, [SeekRecord(*ORDERS, 10, 5)]))
    assert (state.last_leased[ORDERS], state.ledgers[ORDERS].in_flight()) == (9, 0)
    state.replay([(0, 3, [SeekRecord(*PAYMENTS, 7, 6)])])  # its checkpoints fell below the floor
    assert state.last_leased[PAYMENTS] == 6
    assert state.ledgers[PAYMENTS].low_watermark(7) == 7


def answer(request_id: str, at_ms: int, key: LedgerKey = ORDERS) -> AnswerRecord:
    return AnswerRecord(*key, request_id, "digest", at_ms, b'{"statuses": ["acked"]}')


def test_an_answer_is_remembered_and_keeps_the_floor_for_its_window_only() -> None:
    now = now_ms()
    state = state_with(
        (2, [answer("old", now - WINDOW_MS)]), (4, [answer("new", now - WINDOW_MS + 60_000)])
    )
    assert state.answered.find(("g", "old"), now) is None  # its window has ended
    found = state.answered.find(("g", "new"), now)
    assert found is not None and (found.digest, found.place) == ("digest", (0, 4))
    assert state.answered.find(("other", "new"), now) is None  # ids are the group's
    assert state.floors([0], lambda _: -1) == {0: 4}, "only the answer in its window holds it"
    assert len(state.answered) == 1
    assert state.answered.find(("g", "new"), now + 60_000) is None


def test_a_live_answer_holds_the_floor_where_it_was_written() -> None:
    state = PopState(ShardMap(1, 1))
    state.apply(answer("call", now_ms()))
    state.wrote(ORDERS, ([], ["call"]), 0, 17)
    assert state.floors([0], lambda _: -1) == {0: 17}
    assert state.forget_below({0: 17}) == 0 and len(state.answered) == 1
    assert state.forget_below({0: 18}) == 0 and len(state.answered) == 0  # a standby's


def test_a_lane_of_a_group_ordered_by_key_is_a_key_lane_read_again_from_the_start() -> None:
    state = PopState(ShardMap(1, 1), ordered=lambda key: key[0] == "g")
    other: LedgerKey = ("h", "orders", 0)
    state.replay(
        [
            (0, 1, [leased(ORDERS, 1, range(5, 7)), leased(other, 2, range(5, 7))]),
            (0, 2, [AckRecord(*ORDERS, 1, 5, Outcome.RELEASED, 9_000)]),
        ]
    )
    lane = state.ledgers[ORDERS]
    assert isinstance(lane, KeyLane)
    assert ORDERS not in state.last_leased  # its records are all read again, none skipped
    assert state.last_leased[other] == 6
    lane.offer(5, b"a")
    lane.offer(6, b"b")
    assert lane.eligible(10, 8_999) == []  # 5 released until 9,000; 6 still leased
    assert lane.eligible(10, 9_000) == [(5, 2)]
