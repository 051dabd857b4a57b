"""Which partitions a group fetcher (`revive.fetcher`) has paused, so that the records waiting
in its lanes stay bounded however far pops fall behind.

A partition's fetching pauses once PAUSE_AT of its records wait in the lanes (an ordered lane
keeps each record until its message is done), and resumes once pops have taken it down to
RESUME_AT.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import TopicPartition

PAUSE_AT = 5_000  # buffered records per partition before fetching pauses (bounds memory)
RESUME_AT = 1_000


class FetchPauses:
    def __init__(self, consumer: Any) -> None:
        self._consumer = consumer
        self.buffered: dict[tuple[str, int], int] = {}  # records waiting in lanes, per partition
        self._paused: set[tuple[str, int]] = set()

    def count(self, tp: tuple[str, int], delta: int) -> None:
        """`delta` records of `tp` came into the lanes (negative: left them)."""
        buffered = self.buffered.get(tp, 0) + delta
        self.buffered[tp] = buffered
        if buffered >= PAUSE_AT and tp not in self._paused:
            self._consumer.pause([TopicPartition(*tp)])
            self._paused.add(tp)
        elif buffered <= RESUME_AT and tp in self._paused:
            self._consumer.resume([TopicPartition(*tp)])
            self._paused.discard(tp)

    def forget(self, tp: tuple[str, int]) -> None:
        """`tp` is read again from a new offset, with nothing of it buffered."""
        self.buffered.pop(tp, None)
        self._paused.discard(tp)

    def forget_topics(self, gone: set[str]) -> None:
        """The partitions of the topics `gone` are read no more."""
        for tp in [tp for tp in self.buffered if tp[0] in gone]:
            del self.buffered[tp]
        self._paused = {tp for tp in self._paused if tp[0] not in gone}
