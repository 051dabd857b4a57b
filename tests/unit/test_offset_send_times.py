"""When a pop leader sends a group's committed offsets (`revive.offsets.SendTimes`), and which
groups it sends at once because it never sent them (`OffsetCommitter.unsent`)."""

from __future__ import annotations

from typing import cast

from confluent_kafka import TopicPartition

from foundation.shards import ShardMap
from revive.fetcher import GroupFetcher
from revive.offsets import OffsetCommitter, SendTimes
from revive.pop_state import PopState


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_touched_group_is_due_once_its_interval_has_passed() -> None:
    clock = Clock()
    times = SendTimes(every_s=1.0, clock=clock)
    times.touch({"a"})
    assert not times.any_due()
    assert times.take_due() == set()
    clock.now += 0.999
    assert not times.any_due()
    clock.now += 0.001
    assert times.any_due()
    assert times.take_due() == {"a"}
    # Sent: nothing is due until a step touches the group again.
    clock.now += 10
    assert not times.any_due()
    assert times.take_due() == set()


def test_touching_again_does_not_put_a_send_off() -> None:
    """Steps that keep touching a group (acks every few ms) must not delay its send for ever:
    the interval counts from the first touch since the last send."""
    clock = Clock()
    times = SendTimes(every_s=1.0, clock=clock)
    times.touch({"a"})
    for _ in range(7):  # steps of 1/8 s: exact in binary, so the sums are too
        clock.now += 0.125
        times.touch({"a"})
    assert not times.any_due()
    clock.now += 0.125
    times.touch({"a"})
    assert times.take_due() == {"a"}
    times.touch({"a"})  # a step after the send starts a new interval
    clock.now += 0.5
    assert times.take_due() == set()
    clock.now += 0.5
    assert times.take_due() == {"a"}


def test_each_group_has_its_own_interval() -> None:
    clock = Clock()
    times = SendTimes(every_s=1.0, clock=clock)
    times.touch({"a"})
    clock.now += 0.6
    times.touch({"a", "b"})
    clock.now += 0.4
    assert times.take_due() == {"a"}
    assert not times.any_due()
    clock.now += 0.6
    assert times.take_due() == {"b"}


def test_nothing_touched_is_never_due() -> None:
    clock = Clock()
    times = SendTimes(every_s=0.0, clock=clock)
    assert not times.any_due()
    times.touch(set())
    assert times.take_due() == set()
    times.touch({"a"})
    assert times.take_due() == {"a"}  # an interval of 0: due at once


class Fetcher:
    """A group's fetcher as `unsent` sees it: one partition, where its next record to hand out
    is (-1: none fetched), and the offset the group had committed when it was assigned."""

    def __init__(self, cursor: int, committed: int) -> None:
        self.assignment = [TopicPartition("orders", 0)]
        self.committed = {("orders", 0): committed}
        self._cursor = cursor

    def cursor(self, topic: str, partition: int) -> int:
        return self._cursor


def unsent(**fetchers: Fetcher) -> set[str]:
    committer = OffsetCommitter(PopState(ShardMap(1, 1)))
    return committer.unsent(cast(dict[str, GroupFetcher], fetchers))


def test_a_watermark_the_group_has_committed_already_is_not_sent_again() -> None:
    # A role restarted with a record waiting at the group's committed offset sent that offset
    # again, in a transaction of its own; a fence meanwhile failed it with no call to blame.
    assert unsent(restarted=Fetcher(cursor=7, committed=7)) == set()
    assert unsent(took_over=Fetcher(cursor=9, committed=7)) == {"took_over"}
    assert unsent(new=Fetcher(cursor=0, committed=-1001)) == {"new"}  # none committed yet
    assert unsent(idle=Fetcher(cursor=-1, committed=7)) == set()  # nothing fetched: no mark
