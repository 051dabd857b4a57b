"""Each touched group's committed offset: the lowest offset not yet settled (docs/reference.md).

The offsets are committed in a transaction of their own, right after a step's has committed, so
Kafka tooling shows the group's real progress and a committed offset never passes a message
that could still come back: they are taken from what that step made durable.

A group's offsets are sent at most once per `SEND_EVERY_S`, with the first step that comes
after that long since a step first touched the group (an idle step, if need be). Sending them
costs two more broker round trips (AddOffsetsToTxn, TxnOffsetCommit) and the broker a
transaction marker on `__consumer_offsets`: done on every ack step, that was 2 ms of an ack's
9 ms at p50. A committed offset that lags only ever points
below the true watermark, which is safe: what a step settles is durable in its own state
records, and the replay floor follows the offsets as sent (`committed`), not as settled.

Why a transaction of their own: the broker refuses the offsets of a topic deleted a moment ago
(UNKNOWN_TOPIC_OR_PART), and that refusal fails the whole transaction. Inside a step's, it would
throw away the step and restart the shard's pop service, with its pops waiting meanwhile; here
it costs only these offsets, sent again without the deleted topic's (`OffsetSender`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from confluent_kafka import KafkaException, TopicPartition

from foundation.producers_in_turn import ProducersInTurn
from foundation.transactions import Transaction
from revive import seek_stamps
from revive.fetcher import GroupFetcher
from revive.lanes import source_topic
from revive.pop_state import LedgerKey, PopState
from revive.reader import GONE

log = structlog.get_logger(__name__)

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

    def next_due(self) -> float | None:
        """When the first group is due (the clock's time; None: none is touched)."""
        return min(self._touched.values()) + self._every_s if self._touched else None

    def take_due(self) -> set[str]:
        """The groups due now, forgotten until a step touches them again."""
        due = self._due()
        for group in due:
            del self._touched[group]
        return due

    def _due(self) -> set[str]:
        now = self._clock()
        return {group for group, at in self._touched.items() if now - at >= self._every_s}


@dataclass(frozen=True)
class GroupOffsets:
    """Watermarks of one group to commit, with the group's metadata a transaction needs."""

    group: str
    offsets: list[TopicPartition]
    metadata: Any

    def without(self, topics: set[str]) -> GroupOffsets:
        kept = [tp for tp in self.offsets if tp.topic not in topics]
        return GroupOffsets(self.group, kept, self.metadata)


class OffsetCommitter:
    def __init__(self, state: PopState) -> None:
        self._state = state
        self._sent: dict[tuple[str, str, int], int] = {}  # last offset sent per group partition
        self._times = SendTimes()

    def unsent(self, fetchers: dict[str, GroupFetcher]) -> set[str]:
        """Groups with a partition whose watermark this leader has not committed yet. A
        watermark the group's fetcher found committed when it was assigned counts as sent from
        then on.

        A leader that took over may have recovered acks its predecessor never committed to the
        group: with no later record of the group (every message already acked), nothing else
        would move the group's offset, and its lag would stay for good.
        """
        groups = set()
        for group, fetcher in fetchers.items():
            for tp in fetcher.assignment:
                sent = (group, tp.topic, tp.partition)
                if sent in self._sent:
                    continue
                mark = self._low_watermark(group, fetcher, tp.topic, tp.partition)
                if mark is None:
                    continue
                if mark == fetcher.committed.get((tp.topic, tp.partition)):
                    # Kafka has it already: a restarted role sent it again, in a transaction of
                    # its own, a second after its first pop (and a fence then failed that one).
                    self._sent[sent] = mark
                else:
                    groups.add(group)
        return groups

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

    def forget(self, group: str, topics: set[str] | None = None) -> None:
        """Deleted topics (None: the whole group): nothing of them is committed again."""
        for sent in [k for k in self._sent if k[0] == group and (topics is None or k[1] in topics)]:
            del self._sent[sent]

    def due(self) -> bool:
        """Is a group's send due, even if no step touches it now?"""
        return self._times.any_due()

    def next_due(self) -> float | None:
        """When a group's send is next due (monotonic; None: no group waits for one)."""
        return self._times.next_due()

    def touch(self, groups: set[str]) -> None:
        """A step changed these groups' ledgers: their watermarks may have moved."""
        self._times.touch(groups)

    def take(self, fetchers: dict[str, GroupFetcher], also: set[str]) -> list[GroupOffsets]:
        """The watermarks that moved, of the groups due (see `SendTimes`) and of `also`; they
        count as committed once `sent` says so."""
        batch = []
        for group in self._times.take_due() | also:
            fetcher = fetchers.get(group)
            if fetcher is None:
                continue
            offsets = []
            for tp in fetcher.assignment:
                mark = self._low_watermark(group, fetcher, tp.topic, tp.partition)
                if mark is not None and self._sent.get((group, tp.topic, tp.partition)) != mark:
                    # A sought topic's offsets keep its latest seek (`revive.seek_stamps`).
                    stamp = fetcher.seek_stamps.get(tp.topic, 0)
                    offsets.append(seek_stamps.offset(tp.topic, tp.partition, mark, stamp))
            if offsets:  # only when a watermark moved: each send costs a broker round trip
                metadata = fetcher.consumer.consumer_group_metadata()
                batch.append(GroupOffsets(group, offsets, metadata))
        return batch

    def send_due(
        self, sender: OffsetSender, fetchers: dict[str, GroupFetcher], also: set[str]
    ) -> dict[str, set[str]]:
        """Commit through `sender` the watermarks that moved, of the groups due and of `also`
        (`take`); the deleted topics found on the way, by group (their offsets left out)."""
        batch = self.take(fetchers, also)
        committed, deleted = sender.send(batch)
        self.sent(committed)
        if not committed:
            self.not_sent(batch)
        return deleted

    def sent(self, batch: list[GroupOffsets]) -> None:
        for offsets in batch:
            for tp in offsets.offsets:
                self._sent[(offsets.group, tp.topic, tp.partition)] = tp.offset

    def not_sent(self, batch: list[GroupOffsets]) -> None:
        """Their transaction failed: send these groups again when next due."""
        self._times.touch({offsets.group for offsets in batch})

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


class OffsetSender:
    """Commits group offsets in a transaction of their own, leaving out the topics a fresh look
    (`exists`) finds deleted.

    The look comes first because the broker's refusal is slow: librdkafka retries a
    TxnOffsetCommit refused with UNKNOWN_TOPIC_OR_PART until its timeout (a 30 s timeout: 30 s,
    on this machine), and the shard's pops wait meanwhile. A topic deleted between the look and
    the send is refused that way; it is left out then, and the rest sent again at once.
    """

    def __init__(
        self, producers: ProducersInTurn, timeout_s: float, exists: Callable[[str], bool]
    ) -> None:
        self._producers, self._timeout_s, self._exists = producers, timeout_s, exists

    def send(self, batch: list[GroupOffsets]) -> tuple[list[GroupOffsets], dict[str, set[str]]]:
        """(the offsets committed, the deleted topics found per group). Any failure but a
        refusal for an unknown topic is an infrastructure fault, and propagates."""
        deleted: dict[str, set[str]] = {}
        batch, _ = self._without_deleted(batch, deleted)
        while batch:
            try:
                self._commit(batch)
                return batch, deleted
            except KafkaException as error:
                if error.args[0].code() not in GONE:
                    raise
                batch, gone = self._without_deleted(batch, deleted)
                if not gone:  # refused, yet every topic is there: again when next due
                    log.warning("group offsets refused", error=str(error))
                    return [], deleted
        return [], deleted

    def _without_deleted(
        self, batch: list[GroupOffsets], deleted: dict[str, set[str]]
    ) -> tuple[list[GroupOffsets], set[str]]:
        """`batch` without the topics found deleted now (noted in `deleted`); those topics."""
        topics = {tp.topic for offsets in batch for tp in offsets.offsets}
        gone = {topic for topic in topics if not self._exists(topic)}
        for offsets in batch:
            if mine := gone & {tp.topic for tp in offsets.offsets}:
                deleted.setdefault(offsets.group, set()).update(mine)
        return [kept for kept in (o.without(gone) for o in batch) if kept.offsets], gone

    def _commit(self, batch: list[GroupOffsets]) -> None:
        txn = Transaction(self._producers, self._timeout_s, role="pop")
        try:
            for offsets in batch:
                txn.send_offsets(offsets.offsets, offsets.metadata)
            txn.commit()
        except KafkaException as error:
            if txn.open and error.args[0].code() in GONE:  # refused, yet not aborted: close it
                txn.abort()
            raise
