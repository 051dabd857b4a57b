"""Tests for delay_service.timing_wheel.TimingWheelTimer.

The core guarantee is checked against a trivially correct model (a dict scanned and sorted on
every advance): never early, never lost, exactly once, ordered by (due_ms, insertion order).
"""

from __future__ import annotations

import gc
import random
import time
import tracemalloc
import types

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from delay_service.timing_wheel import TimingWheelTimer

START_MS = 1_700_000_000_000
YEAR_MS = 365 * 24 * 3600 * 1000


def drive(timer: TimingWheelTimer, max_steps: int = 1_000_000) -> list[tuple[int, int, str]]:
    """Event-driven loop as the service runs it: sleep until next_expiry_ms, then advance.

    Returns (fired_at_ms, due_ms, schedule_id) for everything, in firing order.
    """
    fired: list[tuple[int, int, str]] = []
    for _ in range(max_steps):
        t = timer.next_expiry_ms()
        if t is None:
            return fired
        fired.extend((t, due, sid) for due, sid in timer.advance(t))
    raise AssertionError("timer did not drain")


# -- model-based stateful test -------------------------------------------------------------------


class TimerModel(RuleBasedStateMachine):
    """Random add / re-add / remove / advance (with and without limit) against a sorted model."""

    def __init__(self) -> None:
        super().__init__()
        self.model: dict[str, tuple[int, int]] = {}  # id -> (due_ms, insertion seq)
        self.seq = 0
        self.max_now = 0
        self.fired: set[str] = set()

    @initialize(
        start=st.integers(0, 10**12),
        tick=st.sampled_from([1, 1, 1, 3, 10]),
        wheel_size=st.sampled_from([2, 4, 8, 512]),
    )
    def setup(self, start: int, tick: int, wheel_size: int) -> None:
        self.timer = TimingWheelTimer(start, tick_ms=tick, wheel_size=wheel_size)
        self.now = start
        self.max_now = start

    @rule(
        sid=st.sampled_from([f"id{i}" for i in range(12)]),
        offset=st.one_of(
            st.integers(-50, 50),
            st.integers(0, 3_000),
            st.integers(-(10**6), 10**9),
        ),
    )
    def add(self, sid: str, offset: int) -> None:
        due = self.max_now + offset
        self.timer.add(sid, due)
        self.model[sid] = (due, self.seq)
        self.seq += 1

    @rule(sid=st.sampled_from([f"id{i}" for i in range(14)]))
    def remove(self, sid: str) -> None:
        assert self.timer.remove(sid) is (sid in self.model)
        self.model.pop(sid, None)
        assert sid not in self.timer

    @rule(
        delta=st.one_of(st.integers(0, 20), st.integers(0, 5_000), st.integers(0, 2 * 10**9)),
        backward=st.integers(0, 30),
        limit=st.one_of(st.none(), st.integers(0, 4)),
    )
    def advance(self, delta: int, backward: int, limit: int | None) -> None:
        # Mostly forward; occasionally a little behind the furthest time seen (a caller whose
        # clock stepped back) which must still never return anything early.
        now = self.max_now + delta - (backward if backward < 5 else 0)
        got = self.timer.advance(now, limit)
        expected = sorted((due, seq, sid) for sid, (due, seq) in self.model.items() if due <= now)
        if limit is not None:
            expected = expected[:limit]
        assert got == [(due, sid) for due, _, sid in expected]
        for _, sid in got:
            del self.model[sid]
        self.max_now = max(self.max_now, now)

    @precondition(lambda self: hasattr(self, "timer"))
    @invariant()
    def size_and_membership(self) -> None:
        assert len(self.timer) == len(self.model)
        for i in range(14):
            assert (f"id{i}" in self.timer) is (f"id{i}" in self.model)

    @precondition(lambda self: hasattr(self, "timer"))
    @invariant()
    def next_expiry_not_late(self) -> None:
        nxt = self.timer.next_expiry_ms()
        if not self.model:
            assert nxt is None
        else:
            assert nxt is not None
            assert nxt <= min(due for due, _ in self.model.values())

    def teardown(self) -> None:
        # Never lost: draining the rest event-driven fires every entry exactly at its due time
        # (or at once if it was already due), in order.
        if not hasattr(self, "timer"):
            return
        fired = drive(self.timer)
        expected = sorted((due, seq, sid) for sid, (due, seq) in self.model.items())
        assert [(due, sid) for _, due, sid in fired] == [(d, s) for d, _, s in expected]
        # next_expiry_ms never overshoots the earliest due entry, so every wake-up is exactly
        # the due time of what it returns (already-due entries report their own due time).
        assert all(at == due for at, due, _ in fired)
        assert len(self.timer) == 0


TimerModel.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_timer_matches_model = TimerModel.TestCase


# -- property tests ------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    offsets=st.lists(
        st.one_of(st.integers(0, 600), st.integers(0, 10**7), st.integers(0, 20 * YEAR_MS)),
        min_size=1,
        max_size=60,
    ),
    tick=st.sampled_from([1, 7]),
    wheel_size=st.sampled_from([2, 16, 512]),
)
def test_event_driven_fires_exactly_at_due_ms(
    offsets: list[int], tick: int, wheel_size: int
) -> None:
    timer = TimingWheelTimer(START_MS, tick_ms=tick, wheel_size=wheel_size)
    for i, off in enumerate(offsets):
        timer.add(f"s{i}", START_MS + off)
    fired = drive(timer)
    # Each entry fires exactly once, at the first wake-up >= its due time, which the
    # next_expiry_ms contract makes exactly its due time (never early, no tick rounding).
    assert sorted(sid for _, _, sid in fired) == sorted(f"s{i}" for i in range(len(offsets)))
    for at, due, _ in fired:
        assert at == due
    assert [due for _, due, _ in fired] == sorted(START_MS + off for off in offsets)


@settings(max_examples=100, deadline=None)
@given(
    dues=st.lists(st.integers(0, 5_000), min_size=1, max_size=80),
    steps=st.lists(st.integers(1, 700), min_size=1, max_size=30),
)
def test_never_early_and_exactly_once_with_arbitrary_polling(
    dues: list[int], steps: list[int]
) -> None:
    timer = TimingWheelTimer(0, wheel_size=8)
    for i, due in enumerate(dues):
        timer.add(f"s{i}", due)
    now, seen = 0, []
    for step in steps:
        now += step
        got = timer.advance(now)
        assert all(due <= now for due, _ in got)
        # Not late either: nothing due by now may still be pending.
        assert all(due > now for i, due in enumerate(dues) if f"s{i}" in timer)
        seen.extend(got)
    seen.extend(timer.advance(10**6))
    assert sorted(sid for _, sid in seen) == sorted(f"s{i}" for i in range(len(dues)))
    assert [due for due, _ in seen] == sorted(dues)


# -- ordering ------------------------------------------------------------------------------------


def test_equal_due_times_fire_in_insertion_order() -> None:
    timer = TimingWheelTimer(0)
    ids = [f"x{i}" for i in range(500)]
    random.Random(7).shuffle(ids)
    for sid in ids:
        timer.add(sid, 42)
    assert timer.advance(42) == [(42, sid) for sid in ids]


def test_insertion_order_kept_when_one_ms_mixes_overflow_and_fine_buckets() -> None:
    # "old" is added while 600 is beyond the first wheel (512 ms) and so sits in an overflow
    # bucket; "new" is added later, after the clock moved, straight into the fine wheel.  When
    # the overflow bucket cascades at 512, "old" lands behind "new" in the fine bucket; the
    # (due, seq) sort must restore insertion order.
    timer = TimingWheelTimer(0)
    timer.add("old", 600)
    assert timer.advance(100) == []
    timer.add("new", 600)
    assert timer.advance(599) == []
    assert timer.advance(600) == [(600, "old"), (600, "new")]


def test_results_sorted_by_due_then_insertion_across_many_times() -> None:
    timer = TimingWheelTimer(0, wheel_size=4)
    rng = random.Random(3)
    expected = []
    for i in range(2_000):
        due = rng.randrange(0, 300)
        timer.add(f"e{i}", due)
        expected.append((due, i, f"e{i}"))
    expected.sort()
    got = timer.advance(300, limit=None)
    assert got == [(due, sid) for due, _, sid in expected]


# -- far future / overflow wheels ----------------------------------------------------------------


def test_far_future_entry_uses_overflow_wheels_and_fires_at_exact_ms() -> None:
    timer = TimingWheelTimer(START_MS)
    due = START_MS + 10 * YEAR_MS + 123
    timer.add("far", due)
    timer.add("near", START_MS + 5)
    # 512 ** 4 ms is ~2.2 years, so ten years needs a fifth wheel.
    assert timer._wheel.levels() == 5
    assert timer.advance(START_MS + 5) == [(START_MS + 5, "near")]
    assert timer.advance(due - 1) == []
    assert "far" in timer
    assert timer.advance(due) == [(due, "far")]
    assert len(timer) == 0


def test_far_future_event_driven_wakeups_are_few_and_exact() -> None:
    timer = TimingWheelTimer(START_MS)
    due = START_MS + 10 * YEAR_MS + 987_654
    timer.add("far", due)
    wakeups = []
    while (t := timer.next_expiry_ms()) is not None:
        wakeups.append(t)
        got = timer.advance(t)
        if got:
            assert got == [(due, "far")]
            assert t == due
    # One wake-up per wheel level at most as the entry cascades down, then the exact ms.
    assert len(wakeups) <= timer._wheel.levels() + 1
    assert wakeups == sorted(wakeups)


def test_long_idle_gap_then_near_entry() -> None:
    # After the clock jumps years ahead, a new near entry must still fire on its exact ms.
    timer = TimingWheelTimer(0)
    timer.add("a", 3 * YEAR_MS)
    assert timer.advance(3 * YEAR_MS) == [(3 * YEAR_MS, "a")]
    timer.add("b", 3 * YEAR_MS + 1)
    timer.add("c", 3 * YEAR_MS + 100_000)
    assert timer.next_expiry_ms() == 3 * YEAR_MS + 1
    assert timer.advance(3 * YEAR_MS + 1) == [(3 * YEAR_MS + 1, "b")]
    assert timer.advance(3 * YEAR_MS + 99_999) == []
    assert timer.advance(3 * YEAR_MS + 100_000) == [(3 * YEAR_MS + 100_000, "c")]


# -- precision -----------------------------------------------------------------------------------


def test_one_ms_precision_no_tick_rounding() -> None:
    timer = TimingWheelTimer(START_MS)
    for off in (1, 2, 511, 512, 513, 1_000, 262_144, 262_145):
        timer.add(f"o{off}", START_MS + off)
    for off in (1, 2, 511, 512, 513, 1_000, 262_144, 262_145):
        assert timer.advance(START_MS + off - 1) == []
        assert timer.advance(START_MS + off) == [(START_MS + off, f"o{off}")]


def test_coarse_tick_is_never_early() -> None:
    # With a 10 ms tick the bucket [100, 110) expires at 100, but an entry due at 105 must wait.
    timer = TimingWheelTimer(0, tick_ms=10)
    timer.add("a", 105)
    timer.add("b", 100)
    assert timer.advance(100) == [(100, "b")]
    assert timer.next_expiry_ms() == 105
    assert timer.advance(104) == []
    assert timer.advance(105) == [(105, "a")]
    # Added inside the current tick [100, 110): no bucket of its own any more, still not early.
    timer.add("c", 108)
    assert timer.next_expiry_ms() == 108
    assert timer.advance(107) == []
    assert timer.advance(108) == [(108, "c")]


def test_now_behind_clock_is_still_never_early() -> None:
    timer = TimingWheelTimer(0)
    assert timer.advance(1_000) == []
    timer.add("past", 500)  # due "immediately", but only for a caller whose now >= 500
    timer.add("a", 1_000)
    assert timer.advance(499) == []
    assert timer.advance(500) == [(500, "past")]
    assert timer.clock_ms == 1_000  # the clock never moves backwards
    assert timer.advance(1_000) == [(1_000, "a")]


# -- remove / re-add / past due ------------------------------------------------------------------


def test_remove_present_and_absent() -> None:
    timer = TimingWheelTimer(0)
    timer.add("a", 10)
    timer.add("b", 10_000_000)  # overflow wheel
    assert timer.remove("missing") is False
    assert timer.remove("a") is True
    assert timer.remove("a") is False
    assert timer.remove("b") is True
    assert len(timer) == 0
    assert "a" not in timer and "b" not in timer
    assert timer.next_expiry_ms() is None
    assert timer.advance(10**9) == []


def test_remove_entry_already_expired_but_not_yet_returned() -> None:
    # limit leaves expired entries queued; removing one of them must still take effect.
    timer = TimingWheelTimer(0)
    for i in range(5):
        timer.add(f"q{i}", 50)
    assert timer.advance(50, limit=2) == [(50, "q0"), (50, "q1")]
    assert timer.remove("q3") is True
    assert timer.remove("q3") is False
    assert len(timer) == 2
    assert timer.advance(50) == [(50, "q2"), (50, "q4")]
    assert len(timer) == 0


def test_re_add_replaces_due_time() -> None:
    timer = TimingWheelTimer(0)
    timer.add("x", 100)
    timer.add("x", 50)
    assert len(timer) == 1
    assert timer.advance(60) == [(50, "x")]
    assert timer.advance(1_000) == []

    timer.add("y", 1_100)
    timer.add("y", 5_000_000)  # later: moves from the fine wheel to an overflow wheel
    # The old position is really gone (not just skipped when it expires): nothing to wake for
    # at 1_100 any more.
    nxt = timer.next_expiry_ms()
    assert nxt is not None and 1_100 < nxt <= 5_000_000
    assert timer.advance(4_999_999) == []
    assert timer.advance(5_000_000) == [(5_000_000, "y")]


def test_re_add_of_queued_entry_replaces_it_and_moves_it_back_in_order() -> None:
    timer = TimingWheelTimer(0)
    for sid in ("a", "b", "c"):
        timer.add(sid, 10)
    assert timer.advance(10, limit=1) == [(10, "a")]
    timer.add("b", 10)  # re-added: now counts as inserted after "c"
    timer.add("c", 20)  # postponed
    assert len(timer) == 2
    assert timer.advance(15) == [(10, "b")]
    assert timer.advance(20) == [(20, "c")]


def test_past_due_entries_are_returned_at_once() -> None:
    timer = TimingWheelTimer(START_MS)
    timer.add("before_start", START_MS - 5)
    timer.add("at_start", START_MS)
    assert timer.next_expiry_ms() is not None
    assert timer.next_expiry_ms() <= START_MS
    assert timer.advance(START_MS) == [(START_MS - 5, "before_start"), (START_MS, "at_start")]

    assert timer.advance(START_MS + 1_000) == []
    assert timer.clock_ms == START_MS + 1_000  # the clock moves even with nothing to expire
    timer.add("late", START_MS + 10)
    timer.add("now", START_MS + 1_000)
    assert timer.next_expiry_ms() <= START_MS + 1_000
    assert timer.advance(START_MS + 1_000) == [
        (START_MS + 10, "late"),
        (START_MS + 1_000, "now"),
    ]


def test_past_due_merges_with_queued_entries_in_due_order() -> None:
    timer = TimingWheelTimer(0)
    timer.add("a", 100)
    timer.add("b", 100)
    assert timer.advance(100, limit=1) == [(100, "a")]
    timer.add("z", 40)  # past due while "b" is still queued: earlier due goes first
    assert timer.advance(100) == [(40, "z"), (100, "b")]


# -- limit / bursts ------------------------------------------------------------------------------


def test_limit_chunks_big_burst_in_order_and_fast() -> None:
    n = 100_000
    due = START_MS + 1
    timer = TimingWheelTimer(START_MS)
    ids = [f"burst-{i}" for i in range(n)]
    for sid in ids:
        timer.add(sid, due)
    t0 = time.perf_counter()
    out: list[tuple[int, str]] = []
    calls = 0
    while True:
        chunk = timer.advance(due, limit=10)
        calls += 1
        if not chunk:
            break
        assert len(chunk) <= 10
        out.extend(chunk)
    elapsed = time.perf_counter() - t0
    assert calls == n // 10 + 1
    assert out == [(due, sid) for sid in ids]
    assert len(timer) == 0
    # Linear work: well under 0.1 s on a laptop.  Re-slicing or re-sorting the burst per chunk
    # would be quadratic (10k chunks x 100k entries) and take seconds to minutes.
    assert elapsed < 1.0, elapsed


def test_limit_leftovers_come_first_next_call() -> None:
    timer = TimingWheelTimer(0)
    for i in range(10):
        timer.add(f"a{i}", 5)
    for i in range(10):
        timer.add(f"b{i}", 6)
    first = timer.advance(6, limit=7)
    second = timer.advance(6, limit=7)
    third = timer.advance(100, limit=7)
    assert len(first) == 7 and len(second) == 7 and len(third) == 6
    everything = first + second + third
    assert everything == [(5, f"a{i}") for i in range(10)] + [(6, f"b{i}") for i in range(10)]
    assert timer.advance(100, limit=0) == []


def test_limit_zero_and_negative() -> None:
    timer = TimingWheelTimer(0)
    timer.add("a", 1)
    assert timer.advance(5, limit=0) == []
    assert "a" in timer
    with pytest.raises(ValueError):
        timer.advance(5, limit=-1)
    assert timer.advance(5, limit=1) == [(1, "a")]


# -- next_expiry_ms ------------------------------------------------------------------------------


def test_next_expiry_none_when_empty_and_exact_on_fine_wheel() -> None:
    timer = TimingWheelTimer(1_000)
    assert timer.next_expiry_ms() is None
    timer.add("a", 1_300)
    timer.add("b", 1_200)
    assert timer.next_expiry_ms() == 1_200
    assert timer.remove("b")
    # The emptied bucket must not make the caller wake up early for nothing.
    assert timer.next_expiry_ms() == 1_300
    assert timer.remove("a")
    assert timer.next_expiry_ms() is None


def test_next_expiry_never_later_than_earliest_overflow_entry() -> None:
    timer = TimingWheelTimer(0)
    timer.add("far", 1_000_000)
    nxt = timer.next_expiry_ms()
    assert nxt is not None and nxt <= 1_000_000
    timer.add("nearer", 700)
    nxt = timer.next_expiry_ms()
    assert nxt is not None and nxt <= 700


def test_next_expiry_reports_already_due_entries() -> None:
    timer = TimingWheelTimer(0)
    timer.add("a", 10)
    timer.add("b", 10)
    timer.advance(10, limit=1)
    nxt = timer.next_expiry_ms()
    assert nxt is not None and nxt <= 10


def test_constructor_validation() -> None:
    with pytest.raises(ValueError):
        TimingWheelTimer(0, tick_ms=0)
    with pytest.raises(ValueError):
        TimingWheelTimer(0, wheel_size=1)


# -- inputs --------------------------------------------------------------------------------------


@pytest.mark.parametrize("due", [1.5, float(START_MS), "1700000000000", None, [START_MS]])
def test_non_integer_due_is_refused_and_changes_nothing(due: object) -> None:
    # A float due time would make an inexact order key (two entries could share one).
    timer = TimingWheelTimer(START_MS)
    timer.add("a", START_MS + 10)
    with pytest.raises(TypeError):
        timer.add("a", due)
    with pytest.raises(TypeError):
        timer.add("b", due)
    assert len(timer) == 1 and "b" not in timer
    assert timer.advance(START_MS + 10) == [(START_MS + 10, "a")]


def test_huge_and_hugely_negative_due_times() -> None:
    timer = TimingWheelTimer(START_MS)
    timer.add("huge", 10**30)  # about a dozen overflow wheels
    timer.add("ancient", -(10**30))  # already due
    timer.add("near", START_MS + 5)
    assert [(at, sid) for at, _, sid in drive(timer)] == [
        (-(10**30), "ancient"),
        (START_MS + 5, "near"),
        (10**30, "huge"),
    ]
    timer.add("huge-again", 10**30 + 10**20)
    assert timer.remove("huge-again") is True
    assert timer.next_expiry_ms() is None


# -- remove finds entries wherever they are ------------------------------------------------------


def test_remove_after_cascade_into_a_finer_wheel() -> None:
    timer = TimingWheelTimer(0)
    timer.add("x", 100_000)  # first on an overflow wheel (the finest spans 512 ms)
    timer.add("y", 100_000)
    assert timer.advance(99_900) == []
    # Its overflow bucket expired: now on the finest wheel, which knows its exact due time.
    assert timer.next_expiry_ms() == 100_000
    assert timer.remove("x") is True
    timer.add("x", 100_050)  # the same id again, later
    assert timer.advance(100_000) == [(100_000, "y")]
    assert timer.advance(100_049) == []
    assert timer.advance(100_050) == [(100_050, "x")]
    assert len(timer) == 0


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), tick=st.sampled_from([1, 7]), size=st.sampled_from([2, 16, 512]))
def test_many_adds_removes_and_advances_match_a_sorted_model(
    seed: int, tick: int, size: int
) -> None:
    """Thousands of operations over a few hundred ids, entries on many levels and in the queues."""
    rng = random.Random(seed)
    timer = TimingWheelTimer(0, tick_ms=tick, wheel_size=size)
    model: dict[str, tuple[int, int]] = {}  # id -> (due_ms, insertion seq)
    now = 0
    for seq in range(3_000):
        sid = f"id{rng.randrange(300)}"
        op = rng.random()
        if op < 0.55:
            due = now + rng.choice(
                [rng.randrange(-100, 100), rng.randrange(10**3), rng.randrange(10**7)]
            )
            timer.add(sid, due)
            model[sid] = (due, seq)
        elif op < 0.8:
            assert timer.remove(sid) is (model.pop(sid, None) is not None)
        else:
            now += rng.choice([0, 1, rng.randrange(100), rng.randrange(10**5)])
            limit = rng.choice([None, 0, 1, 5, 50])
            expected = sorted((due, s, i) for i, (due, s) in model.items() if due <= now)
            expected = expected[:limit] if limit is not None else expected
            assert timer.advance(now, limit) == [(due, i) for due, _, i in expected]
            for _, _, i in expected:
                del model[i]
        assert len(timer) == len(model)
    rest = sorted((due, s, i) for i, (due, s) in model.items())
    assert [(due, sid) for _, due, sid in drive(timer)] == [(due, i) for due, _, i in rest]


# -- memory: nothing per entry for the garbage collector -----------------------------------------


def populated(n: int, ids: list[str]) -> TimingWheelTimer:
    """A 10 s window filled every ms, far-future and late entries, a ready backlog, removals.

    The same wheel buckets are used for every n that is a multiple of 10_000; only the number of
    entries per bucket and per queue changes with n.
    """
    timer = TimingWheelTimer(START_MS)
    for i in range(n):
        timer.add(ids[i], START_MS + 1 + i % 10_000)
    for i in range(n, n + n // 10):
        timer.add(ids[i], START_MS + 24 * 3600 * 1000 + i % 1_000)  # a coarse overflow wheel
    assert len(timer.advance(START_MS + 5_000, limit=100)) == 100  # ~n/2 left in the ready queue
    for i in range(n + n // 10, n + n // 5):
        timer.add(ids[i], START_MS - i)  # past due: the late heap
    # Some on wheels, some queued (removed lazily), a few already taken.
    removed = sum(map(timer.remove, ids[: n + n // 5 : 3]))
    assert len(timer) == n + n // 5 - 100 - removed
    assert timer.due_backlog() > n // 3
    return timer


def gc_tracked_reachable(root: object) -> int:
    """GC-tracked objects reachable from ``root``, not following classes or modules."""
    seen: set[int] = set()
    stack, tracked = [root], 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, type | types.ModuleType):
            continue
        seen.add(id(obj))
        tracked += gc.is_tracked(obj)
        stack.extend(gc.get_referents(obj))
    return tracked


def test_gc_tracked_objects_of_the_wheel_do_not_grow_with_entries() -> None:
    ids = [f"{i:026d}" for i in range(120_000)]
    small, large = populated(10_000, ids), populated(100_000, ids)
    assert len(large) > 9 * len(small)
    # Buckets, wheels and queues: a number set by wheel_size and levels, the same for 10x the
    # entries.  One object per entry (the old _Entry design) adds ~90k here.
    assert gc_tracked_reachable(large) == gc_tracked_reachable(small)
    assert gc_tracked_reachable(large) < 3 * 512 * large._wheel.levels()


def test_a_populated_wheel_adds_no_per_entry_work_for_the_collector() -> None:
    ids = [f"{i:026d}" for i in range(120_000)]
    gc.collect()
    before = len(gc.get_objects())
    timer = populated(100_000, ids)
    gc.collect()
    added = len(gc.get_objects()) - before
    assert len(timer) > 75_000
    assert added < 5_000, added  # one object per entry would be > 75_000


def test_memory_per_entry() -> None:
    ids = [f"{i:026d}" for i in range(100_000)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        timer = TimingWheelTimer(START_MS)
        for i, sid in enumerate(ids):
            timer.add(sid, START_MS + 1 + i % 10_000)
        per_entry = (tracemalloc.get_traced_memory()[0] - before) / len(ids)
    finally:
        tracemalloc.stop()
    assert len(timer) == len(ids)
    # Two dict slots (index, bucket) and one int; an entry object and its two ints cost ~100
    # bytes more.
    assert per_entry < 150, per_entry
