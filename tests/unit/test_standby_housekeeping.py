"""The standby's step. Its housekeeping (`Standby._forget_released`) skips a round when Kafka
fails it, instead of restarting the standby: while the broker restarts, the group coordinator's
"not coordinator" answers to the replay-floor lookup restarted it 11 times in 10 restarts. And
the CPU its thread spends is counted (`kpd_standby_cpu_seconds_total`)."""

from __future__ import annotations

import time
from typing import Any, cast

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from cluster.standby import Standby
from foundation.metrics import STANDBY_CPU
from foundation.shards import ShardMap
from revive.metrics import STANDBY_CHECKPOINTS
from revive.pop_follower import PopFollower


class QuietFollower:
    """The schedules' follower, with nothing to apply."""

    def poll_once(self, _timeout_s: float) -> int:
        return 0


class BusyFollower:
    """The schedules' follower: each poll spends `cpu_s` of its thread's CPU, then waits
    `wait_s` for records, as a consumer does, at no CPU."""

    def __init__(self, cpu_s: float, wait_s: float) -> None:
        self.cpu_s, self.wait_s = cpu_s, wait_s

    def poll_once(self, _timeout_s: float) -> int:
        until = time.thread_time() + self.cpu_s
        while time.thread_time() < until:
            pass
        time.sleep(self.wait_s)
        return 1


class FloorsReader:
    """The pop-state reader: nothing to read; the floors lookup fails while `failing`."""

    def __init__(self) -> None:
        self.failing = True
        self.looked = 0

    def read(self, _timeout_s: float) -> list[Any]:
        return []

    def positions(self) -> list[TopicPartition]:
        return []

    def floors(self) -> dict[int, int]:
        self.looked += 1
        if self.failing:
            raise KafkaException(KafkaError(KafkaError.NOT_COORDINATOR))
        return {}


def test_a_failed_floors_lookup_skips_the_round_and_the_next_one_counts() -> None:
    reader = FloorsReader()
    pops = PopFollower(ShardMap(2, 2))
    schedules = (frozenset[int](), lambda _: cast(Any, QuietFollower()))
    standby = Standby(
        cast(Any, None), schedules, (pops, cast(Any, reader), frozenset()), cast(Any, None)
    )
    STANDBY_CHECKPOINTS.set(7)

    standby.step()  # the lookup fails: the step goes on, the gauge keeps its last value
    assert reader.looked == 1
    assert STANDBY_CHECKPOINTS._value.get() == 7

    reader.failing = False
    standby.step()  # within RELEASED_EVERY_S of the last round: not looked up
    assert reader.looked == 1
    standby._released_at = 0.0  # the next round is due
    standby.step()
    assert reader.looked == 2
    assert STANDBY_CHECKPOINTS._value.get() == 0  # no followed state places any checkpoint


def test_the_cpu_of_a_step_is_counted_and_its_waits_are_not() -> None:
    reader = FloorsReader()
    reader.failing = False
    pops = PopFollower(ShardMap(2, 2))
    follower = BusyFollower(cpu_s=0.05, wait_s=0.0)
    schedules = (frozenset[int](), lambda _: cast(Any, follower))
    standby = Standby(
        cast(Any, None), schedules, (pops, cast(Any, reader), frozenset()), cast(Any, None)
    )
    before = STANDBY_CPU._value.get()
    standby.step()
    assert 0.05 <= STANDBY_CPU._value.get() - before < 0.5

    follower.cpu_s, follower.wait_s = 0.0, 0.1  # a step that waits for records
    before = STANDBY_CPU._value.get()
    standby.step()
    assert STANDBY_CPU._value.get() - before < 0.02
