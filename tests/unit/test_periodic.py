"""The background-job base: rounds at its pace, a failing round does not end the job, and a stop
(from outside or from a round) ends it without waiting forever."""

from __future__ import annotations

import threading
import time

from kafka_helpers import wait_for

from foundation.periodic import PeriodicThread


class Rounds(PeriodicThread):
    def __init__(self, every_s: float, fail_on: set[int], stop_on: int | None = None) -> None:
        super().__init__("rounds", every_s, join_s=2)
        self.times: list[float] = []
        self._fail_on, self._stop_on = fail_on, stop_on

    def tick(self) -> None:
        self.times.append(time.monotonic())
        n = len(self.times)
        if n == self._stop_on:
            self.stop()
        if n in self._fail_on:
            raise RuntimeError(f"round {n} failed")


def test_rounds_keep_their_pace_and_survive_a_failing_round() -> None:
    job = Rounds(every_s=0.05, fail_on={2})
    job.start()
    try:
        wait_for(lambda: len(job.times) >= 5, 5, "five rounds, past the failing second")
    finally:
        job.stop()
    gaps = [b - a for a, b in zip(job.times, job.times[1:], strict=False)]
    assert min(gaps) >= 0.045  # paced, not spinning
    assert not job._thread.is_alive()


def test_a_round_can_stop_its_own_job() -> None:
    job = Rounds(every_s=0.01, fail_on=set(), stop_on=3)
    job.start()
    job._thread.join(timeout=5)
    assert not job._thread.is_alive() and len(job.times) == 3


def test_stop_waits_for_the_round_in_hand_but_not_forever() -> None:
    release = threading.Event()

    class Stuck(PeriodicThread):
        def tick(self) -> None:
            release.wait()

    job = Stuck("stuck", 0.01, join_s=0.2)
    job.start()
    started = time.monotonic()
    job.stop()
    assert 0.15 <= time.monotonic() - started < 2  # bounded by join_s
    release.set()
    job._thread.join(timeout=5)
    assert not job._thread.is_alive()  # and it ends once the round returns


def test_stopping_a_job_never_started_is_harmless() -> None:
    Rounds(every_s=1, fail_on=set()).stop()
