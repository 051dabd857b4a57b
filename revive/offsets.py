"""Each touched group's committed offset: the lowest offset not yet settled (DESIGN: pop).

The offsets go into a step's transaction, so Kafka tooling shows the group's real progress
and a committed offset never passes a message that could still come back.

A group's offsets are sent at most once per `SEND_EVERY_S`, with the first step that comes
after that long since a step first touched the group (an idle step, if need be). Sending them
costs a step two more broker round trips (AddOffsetsToTxn, TxnOffsetCommit) and the broker a
transaction marker on `__consumer_offsets`: done on every ack step, that was 2 ms of an ack's
9 ms at p50 (BENCHMARKS.md, 2026-11-27 05:15). A committed offset that lags only ever points
below the true watermark, which is safe: what a step settles is durable in its own state
records, and the replay floor follows the offsets as sent (`committed`), not as settled.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import TopicPartition

from revive.fetcher import GroupFetcher, source_topic
from revive.pop_state import LedgerKey, PopState
from revive.pop_step import PopStep

SEND_EVERY_S = 1.0


class SendTimes:
    """When each group's offsets are next due: `SEND_EVERY_S` after a step first touched it
    since its last send (pure logic, so it is tested without Kafka)."""

    def __init__(
        self, every_s: float = SEND_EVERY_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._every_s, self._clock = every_s, clock
        self._touched: dict[str, float] = {}  # group -> when first touched since its last send

    def touch(self, groups: set[str]) -> None:
        now = self._clock()
        for group in groups:
            self._touched.setdefault(group, now)

    def any_due(self) -> bool:
        return bool(self._due())

    def take_due(self) -> set[str]:
        """The groups due now, forgotten until a step touches them again."""
        due = self._due()
        for group in due:
            del self._touched[group]
        return due

    def _due(self) -> set[str]:
        now = self._clock()
        return {group for group, at in self._touched.items() if now - at >= self._every_s}


class OffsetCommitter:
    def __init__(self, state: PopState) -> None:
        self._state = state
        self._sent: dict[tuple[str, str, int], int] = {}  # last offset sent per group partition
        self._times = SendTimes()

    def unsent(self, fetchers: dict[str, GroupFetcher]) -> set[str]:
        """Groups with a partition whose watermark this leader has not committed yet.

        A leader that took over may have recovered acks its predecessor never committed to the
        group: with no later record of the group (every message already acked), nothing else
        would move the group's offset, and its lag would stay for good.
        """
        return {
            group
            for group, fetcher in fetchers.items()
            for tp in fetcher.assignment
            if (group, tp.topic, tp.partition) not in self._sent
            and self._low_watermark(group, fetcher, tp.topic, tp.partition) is not None
        }

    def committed(self, fetchers: dict[str, GroupFetcher], key: LedgerKey) -> int:
        """The group's committed offset of a ledger's source partition, as far as this leader
        knows: the last it sent, else the one its fetcher started from, else -1."""
        group, lane, partition = key
        topic = source_topic(lane)
        sent = self._sent.get((group, topic, partition))
        if sent is not None:
            return sent
        fetcher = fetchers.get(group)
        return -1 if fetcher is None else fetcher.committed.get((topic, partition), -1)

    def forget(self, group: str, topics: set[str]) -> None:
        """Deleted topics: nothing of them is committed again."""
        for sent in [k for k in self._sent if k[0] == group and k[1] in topics]:
            del self._sent[sent]

    def due(self) -> bool:
        """Is a group's send due, so that a step must commit even if it changed nothing?"""
        return self._times.any_due()

    def commit(
        self, fetchers: dict[str, GroupFetcher], step: PopStep, also: set[str] | None = None
    ) -> None:
        """Send the watermarks that moved, of the groups due (see `SendTimes`) and of `also`."""
        self._times.touch(step.groups)
        for group in self._times.take_due() | (also or set()):
            fetcher = fetchers.get(group)
            if fetcher is None:
                continue
            offsets = []
            for tp in fetcher.assignment:
                mark = self._low_watermark(group, fetcher, tp.topic, tp.partition)
                if mark is not None and self._sent.get((group, tp.topic, tp.partition)) != mark:
                    offsets.append(TopicPartition(tp.topic, tp.partition, mark))
                    self._sent[(group, tp.topic, tp.partition)] = mark
            if offsets:  # only when a watermark moved: each send costs a broker round trip
                step.txn.send_offsets(offsets, fetcher.consumer.consumer_group_metadata())

    def _low_watermark(
        self, group: str, fetcher: GroupFetcher, topic: str, partition: int
    ) -> int | None:
        cursor = fetcher.cursor(topic, partition)
        if cursor < 0:
            return None
        marks = [cursor]
        for (g, lane, p), ledger in self._state.ledgers.items():
            if g == group and p == partition and source_topic(lane) == topic:
                floor = self._state.last_leased.get((g, lane, p), -1) + 1
                marks.append(ledger.low_watermark(max(cursor, floor)))
        return min(marks)
