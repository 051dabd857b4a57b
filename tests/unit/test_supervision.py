"""Supervisor and watchdog logic (pure threads and time; the Kafka side is in integration tests)."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Message
from kafka_helpers import wait_for
from role_helpers import FencingRole, HandingRole, SteppingRole

from foundation import supervision
from foundation.metrics import LEADER_RESTARTS, LOOP_STALLED
from foundation.supervision import LoopHealth, Supervisor
from foundation.watchdog import Watchdog


class FlakyRole:
    """Fails in `step` the first `failures` times it is made, then steps quietly."""

    made = 0

    def __init__(self, failures: int, stepped: threading.Event) -> None:
        FlakyRole.made += 1
        self._fail = FlakyRole.made <= failures
        self._stepped = stepped
        self.closed = False

    def start(self) -> None:
        pass

    def step(self) -> None:
        if self._fail:
            raise ValueError("boom")
        self._stepped.set()
        time.sleep(0.005)

    def close(self) -> None:
        self.closed = True


def restarts(role: str, shard: str, reason: str) -> float:
    return LEADER_RESTARTS.labels(role, shard, reason)._value.get()


def test_a_failing_role_restarts_and_counts_the_reason(monkeypatch) -> None:
    monkeypatch.setattr(supervision, "BACKOFF_S", (0.01,))
    FlakyRole.made = 0
    stepped = threading.Event()
    made: list[FlakyRole] = []

    def make(_: LoopHealth) -> FlakyRole:
        made.append(FlakyRole(2, stepped))
        return made[-1]

    before = restarts("flaky", "7", "ValueError")
    health = LoopHealth("flaky", 7)
    supervisor = Supervisor(health, make)
    supervisor.start()
    assert stepped.wait(5), "the role never ran after its failures"
    assert restarts("flaky", "7", "ValueError") - before == 2
    assert len(health.restarts) == 2 and "boom" in (health.last_failure or "")
    assert supervisor.stop(timeout_s=5)
    assert [role.closed for role in made] == [True, True, True]  # every instance was closed
    assert not health.running


def test_watchdog_reports_a_quiet_loop_then_gives_up_once() -> None:
    stalled: list[str] = []
    watchdog = Watchdog(
        report_after_s=0.2, give_up_after_s=0.6, on_stall=lambda h: stalled.append(h.name),
        interval_s=0.02,
    )  # fmt: skip
    quiet = watchdog.watch(LoopHealth("stuck", 3))
    busy = watchdog.watch(LoopHealth("busy", 3))
    quiet.running = busy.running = True
    quiet.current = Message(topic="orders", partition=1, offset=42)
    keep_beating = threading.Event()

    def beat() -> None:
        while not keep_beating.wait(0.02):
            busy.beat()

    beater = threading.Thread(target=beat)
    beater.start()
    watchdog.start()
    try:
        assert watchdog.problems() == []
        problems = wait_for(watchdog.problems, 5, "a stall reported")
        assert len(problems) == 1 and problems[0].startswith("stuck[3] stalled for")
        assert "orders/1@42" in problems[0]
        stalled_s = LOOP_STALLED.labels("stuck", "3")._value.get
        wait_for(lambda: stalled_s() > 0, 5, "the stall in the metric")
        assert LOOP_STALLED.labels("busy", "3")._value.get() == 0
        wait_for(lambda: stalled, 5, "give up")
        time.sleep(0.3)  # a settle window: proves on_stall is not called a second time
        assert stalled == ["stuck[3]"]
    finally:
        keep_beating.set()
        beater.join()
        watchdog.stop()


def test_a_loop_that_is_not_running_is_never_stalled() -> None:
    watchdog = Watchdog(report_after_s=0.0, give_up_after_s=0.0, on_stall=lambda h: None)
    idle = watchdog.watch(LoopHealth("idle", 0))
    idle.last_beat -= 100
    assert watchdog.problems() == []
    idle.running = True
    assert watchdog.problems()[0].startswith("idle[0] stalled")


def test_crash_loop_is_reported_with_the_last_failure() -> None:
    watchdog = Watchdog(report_after_s=60, give_up_after_s=60, on_stall=lambda h: None)
    health = watchdog.watch(LoopHealth("delay", 0))
    now = time.monotonic()
    for _ in range(supervision.CRASH_LOOP_RESTARTS):
        health.restarts.append(now)
    health.last_failure = "timed_out: commit"
    assert watchdog.problems() == []  # at the threshold, not over it
    health.restarts.append(now)
    [problem] = watchdog.problems()
    assert "delay[0] restarted" in problem and "timed_out: commit" in problem
    health.restarts.clear()
    health.restarts.extend([now - supervision.CRASH_LOOP_WINDOW_S - 1] * 4)
    assert watchdog.problems() == []  # old restarts do not count


def test_a_stalled_loop_says_which_call_it_is_stuck_in() -> None:
    release = threading.Event()

    class StuckRole(FlakyRole):
        def step(self) -> None:
            release.wait(10)  # stands for a Kafka call that ignores its timeout

    health = LoopHealth("stuck", 4)
    supervisor = Supervisor(health, lambda _: StuckRole(0, threading.Event()))
    assert health.stack() == "(not running)"
    supervisor.start()
    try:
        wait_for(lambda: "release.wait(10)" in health.stack(), 5, "the stuck call in the stack")
        assert "in step" in health.stack()
    finally:
        release.set()
        assert supervisor.stop(timeout_s=5)


def test_a_released_role_goes_on_until_fenced_then_ends_without_a_restart(monkeypatch) -> None:
    monkeypatch.setattr(supervision, "BACKOFF_S", (0.01,))
    made: list[HandingRole] = []

    def make(_: LoopHealth) -> HandingRole:
        made.append(HandingRole())
        return made[-1]

    supervisor = Supervisor(LoopHealth("handing", 5), make)
    supervisor.start()
    wait_for(lambda: supervisor.role is not None, 5, "the role started")
    before = restarts("handing", "5", "RuntimeError")
    assert supervisor.release()
    assert made[0].handing_over
    time.sleep(0.05)
    assert not supervisor.ended  # still delivering: nobody fenced it yet
    made[0].fenced.set()
    wait_for(lambda: supervisor.ended, 5, "the fenced role ended")
    assert len(made) == 1 and made[0].closed  # not made again
    assert restarts("handing", "5", "RuntimeError") == before  # a handover is no failure


def test_a_role_that_cannot_hand_over_is_not_released() -> None:
    stepped = threading.Event()
    FlakyRole.made = 0
    supervisor = Supervisor(LoopHealth("plain", 6), lambda _: FlakyRole(0, stepped))
    supervisor.start()
    assert stepped.wait(5)
    assert not supervisor.release()  # the caller stops it instead
    assert supervisor.stop(timeout_s=5)


class SlowStart(SteppingRole):
    """Starts by reading for a minute, beating as it goes (a catch-up on a long state topic)."""

    def __init__(self, health: LoopHealth) -> None:
        super().__init__("slow", health.shard)
        self.health = health

    def start(self) -> None:
        until = time.monotonic() + 60
        while time.monotonic() < until:
            self.health.beat_unless_stopping()
            time.sleep(0.01)


def test_stopping_a_role_still_starting_does_not_wait_for_its_start() -> None:
    made: list[SlowStart] = []
    health = LoopHealth("slow", 9)  # the supervisor passes it to make()

    def make(health: LoopHealth) -> SlowStart:
        made.append(SlowStart(health))
        return made[-1]

    before = restarts("slow", "9", "StopRequested")
    supervisor = Supervisor(health, make)
    supervisor.start()
    wait_for(lambda: made, 5, "the role is starting")
    began = time.monotonic()
    assert supervisor.stop(timeout_s=30)
    assert time.monotonic() - began < 1  # at its next beat, not after its minute of reading
    assert made[0].closed and len(made) == 1
    assert restarts("slow", "9", "StopRequested") == before  # a stop is no failure


@pytest.mark.parametrize("tell", ["request_stop", "release"])
def test_a_role_told_to_go_while_fencing_begins_no_other_fence(tell: str) -> None:
    """Asked to stop, or released to another member, a role whose start is inside its first
    `init_transactions` finishes that one (it cannot be called back) and begins no other: it
    would fence the shard's next owner. `in_fence` shows the one in flight meanwhile."""
    made: list[FencingRole] = []

    def make(health: LoopHealth) -> FencingRole:
        made.append(FencingRole("pop", 3))
        made[-1].health = health
        return made[-1]

    supervisor = Supervisor(LoopHealth("pop", 3), make)
    supervisor.start()
    wait_for(lambda: made and made[0].fences_begun == 1, 5, "its first fence sent")
    assert supervisor.health.in_fence
    getattr(supervisor, tell)()
    made[0].may_end_fence.set()
    wait_for(lambda: supervisor.ended, 5, "the role ended")
    assert made[0].fences_begun == 1 and len(made) == 1
    assert not supervisor.health.in_fence


def test_a_loop_waiting_for_input_is_not_stalled_and_beats_when_it_wakes() -> None:
    """An idle pop role waits in its inbox with no bound (`LoopHealth.waiting`): no quiet time
    counts meanwhile, and the wait's end is a beat; outside it the quiet time counts again."""
    watchdog = Watchdog(report_after_s=0.05, give_up_after_s=60, on_stall=lambda h: None)
    health = watchdog.watch(LoopHealth("idle", 1))
    health.running = True
    health.last_beat -= 10  # its last step ended long ago
    with health.waiting():
        assert watchdog.problems() == []
        assert health.quiet_s(time.monotonic()) == 0.0
    assert health.quiet_s(time.monotonic()) < 0.05  # woken: a beat
    health.last_beat -= 10
    assert watchdog.problems() == [f"idle[1] stalled for {health.quiet_s(time.monotonic()):.1f} s"]
