"""WindowPayloads: what the delay leader holds in memory is the committed state, within budget."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from delay_service.schedules import Schedule, State
from delay_service.window_payloads import ENTRY_OVERHEAD_BYTES, WindowPayloads, held_bytes
from foundation.record_size import HEADER_FRAMING_BYTES

WINDOW_END = 10_000


def pending(schedule_id: str, due_ms: int = 5_000, value: bytes = b"v" * 100) -> Schedule:
    return Schedule(
        schedule_id=schedule_id, state=State.SCHEDULED, target="t", due_ms=due_ms,
        key=b"k", value=value, headers=(("h", b"x"), ("n", None)),
    )  # fmt: skip


def test_held_bytes_counts_payload_headers_and_id():
    headers = (1 + 1 + HEADER_FRAMING_BYTES) + (1 + 0 + HEADER_FRAMING_BYTES)
    assert held_bytes(pending("abc")) == ENTRY_OVERHEAD_BYTES + 3 + 1 + 100 + headers


def test_applied_holds_pending_in_window_and_drops_everything_else():
    window = WindowPayloads(budget_bytes=1 << 20)
    soon, late, done = pending("soon"), pending("late", due_ms=WINDOW_END), pending("done")
    window.applied([soon, late, done], WINDOW_END)
    assert window.get("soon") is soon
    assert window.get("late") is None  # due at the window's end: the slide loads it
    assert window.get("done") is done
    window.applied([done.settled(State.DELIVERED, 6_000), soon.settled(State.CANCELLED, 1)], 0)
    assert window.get("done") is None and window.get("soon") is None
    assert len(window) == 0 and window.bytes == 0


def test_a_newer_pending_record_replaces_the_held_one():
    window = WindowPayloads(budget_bytes=1 << 20)
    window.applied([pending("a", value=b"1")], WINDOW_END)
    newer = pending("a", value=b"22")
    window.applied([newer], WINDOW_END)
    assert window.get("a") is newer
    assert window.bytes == held_bytes(newer)


def test_the_budget_bounds_what_is_held():
    one = held_bytes(pending("a0"))
    window = WindowPayloads(budget_bytes=3 * one)
    results = [window.hold(pending(f"a{i}")) for i in range(5)]
    assert results == [True, True, True, False, False]
    assert window.get("a3") is None and window.bytes == 3 * one
    window.drop("a0")
    assert window.hold(pending("a4")) is True  # room again once one leaves
    # A replacement that no longer fits leaves neither version held (the index has the truth).
    assert window.hold(pending("a1", value=b"v" * 10_000)) is False
    assert window.get("a1") is None and window.bytes == 2 * one


def test_only_pending_schedules_are_held():
    window = WindowPayloads(budget_bytes=1 << 20)
    with pytest.raises(ValueError, match="only pending"):
        window.hold(pending("a").settled(State.DELIVERED, 1))


STATES = st.sampled_from([State.SCHEDULED, State.DELIVERED, State.CANCELLED])
RECORDS = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c", "d"]),
        STATES,
        st.integers(0, 2 * WINDOW_END),
        st.binary(max_size=300),
    ),
    max_size=40,
)


@given(steps=st.lists(RECORDS, max_size=8), budget=st.integers(0, 2_000))
def test_what_is_held_is_never_stale_and_never_over_budget(steps, budget):
    """Model: the last committed record of each id. A held entry is always that record, pending
    and due in the window; the byte count is exact and within the budget."""
    window = WindowPayloads(budget_bytes=budget)
    last: dict[str, Schedule] = {}
    for records in steps:
        schedules = [
            Schedule(schedule_id=i, state=s, target="t", due_ms=due, value=value)
            for i, s, due, value in records
        ]
        window.applied(schedules, WINDOW_END)
        last.update((s.schedule_id, s) for s in schedules)
        held = {i: window.get(i) for i in "abcd" if window.get(i) is not None}
        for schedule_id, schedule in held.items():
            assert schedule is last[schedule_id]
            assert schedule.state is State.SCHEDULED and schedule.due_ms < WINDOW_END
        assert window.bytes == sum(held_bytes(s) for s in held.values()) <= budget
        assert len(window) == len(held)
