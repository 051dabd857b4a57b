"""Read a pop group's topics from Kafka and sort the records into lanes.

A *lane* is a stream of records handed out in offset order: one per partition of a popped topic,
and, in the group's retry topic, one per (partition, origin topic), because the retry topic of a
group carries retries of all its topics. Each lane has its own ledger (`revive.ledger`).

One consumer per group and shard, with the group's name as `group.id`, so the offsets the pop
service commits (in its transactions) are the group's offsets that Kafka tooling shows. It is
assigned explicitly the partitions its shard serves (`foundation.shards`: each (group, topic,
partition) belongs to one shard), never rebalanced: only the shard's leader reads them.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Message, TopicPartition
from kpd_core import lane_runs

from foundation.clock import now_ms
from foundation.kafka_clients import consume_ready, state_consumer
from foundation.problem import Problem
from foundation.topics import await_leaders
from revive import seek_stamps
from revive.fetch_pauses import FetchPauses
from revive.lanes import UNTRUSTED, Fetched, LaneKey, source_topic
from revive.ordered_lanes import OrderedLanes

# Records moved into lanes per consume call: each is a tracked `Message` until it is copied, and
# a few hundred at a time stay under the collector's young threshold (700 objects).
FETCH_CHUNK = 500
FETCH_CHUNKS = 4  # per call: as many records as one consume of 2,000 moved before
# How long the broker holds an idle fetch: an arriving record answers it at once, so this bounds
# only the idle polling (10 a second per group and shard at 100 ms) and how soon a topic newly
# popped, or a partition resumed, joins the fetch.
FETCH_WAIT_MS = 500


class GroupFetcher:
    def __init__(
        self,
        group: str,
        retry_topic: str,
        client_config: dict[str, Any],
        last_leased: Callable[[LaneKey], int],
        owns: Callable[[str, int], bool],
        ordered: OrderedLanes | None = None,  # a group ordered by key: its origin lanes
    ) -> None:
        self.group, self.retry_topic = group, retry_topic
        self.consumer = state_consumer(client_config, group, **{"fetch.wait.max.ms": FETCH_WAIT_MS})
        self._last_leased = last_leased  # offsets up to it are known to the ledgers already
        self._owns = owns  # (topic, partition) -> does this shard serve that source partition?
        self.ordered = ordered
        self.topics: set[str] = set()
        # Origins whose topic was deleted while this group read it: no pop can ask for their
        # retry copies any more, so they are dead-lettered (`Leaser.dead_letter_unpoppable`).
        self.deleted: set[str] = set()
        self.assignment: list[TopicPartition] = []
        self.committed: dict[tuple[str, int], int] = {}  # the group's offsets when assigned
        # The latest seek of each origin topic (`revive.seek_stamps`): older retry copies of
        # its messages are dropped unread.
        self.seek_stamps: dict[str, int] = {}
        # Set when such copies were dropped: no step settles them, so the group's offsets must be
        # sent for them to pass (`GroupFetchers.take_skipping`).
        self.skipped = False
        self._lanes: dict[LaneKey, deque[Fetched]] = {}
        self._by_origin: dict[str, list[LaneKey]] = {}  # origin topic -> its lanes
        self._pauses = FetchPauses(self.consumer)
        # The offset after the last record the consumer handed over, per partition (read by the
        # arrival watch from its thread: one dict lookup).
        self._handed: dict[tuple[str, int], int] = {}

    def add_topic(self, topic: str, timeout_s: float) -> None:
        """Start reading `topic` (and, the first time, the retry topic) from committed offsets."""
        self.deleted.discard(topic)  # made again under its old name: popped again
        new = [t for t in (topic, self.retry_topic) if t not in self.topics]
        if not new:
            return
        # The retry topic may have been made a moment ago, by another shard's fetcher: waited
        # for. A popped topic the broker does not know (deleted since the call's check) fails.
        made = [self.retry_topic] if self.retry_topic in new else []
        metadata = await_leaders(self.consumer, made, timeout_s)
        if topic not in metadata:
            raise Problem(404, "topic_not_found", f"topic {topic!r} does not exist")
        partitions = [TopicPartition(t, p) for t in new for p in metadata[t].partitions]
        # Every partition's, not only those read here: each may carry the topic's latest seek.
        every = self.consumer.committed(partitions, timeout=timeout_s)
        if topic != self.retry_topic:
            self.raise_stamp(
                topic, seek_stamps.of_committed([tp for tp in every if tp.topic == topic])
            )
        committed = sorted(
            (tp for tp in every if self._owns(tp.topic, tp.partition)),
            key=lambda tp: (tp.topic, tp.partition),
        )
        start = [
            TopicPartition(
                tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            )
            for tp in committed
        ]
        self.committed.update({(tp.topic, tp.partition): tp.offset for tp in committed})
        if self.ordered is not None and topic != self.retry_topic:
            for tp in committed:
                if tp.topic == topic:
                    self.ordered.start((topic, tp.partition), tp.offset)
        self.consumer.incremental_assign(start)
        self.assignment.extend(start)
        self.topics.update(new)

    def raise_stamp(self, topic: str, stamp: int) -> None:
        """`topic` was sought under `stamp` (if later than the one known): drop the retry copies
        buffered here that were made before."""
        if stamp <= self.seek_stamps.get(topic, 0):
            return
        self.seek_stamps[topic] = stamp
        for key in self._by_origin.get(topic, ()):
            lane = self._lanes.get(key)
            if "/" in key[0] and lane:
                kept = deque(pair for pair in lane if not seek_stamps.made_before(pair[0], stamp))
                self._lanes[key] = kept  # one reference swap: readers elsewhere see either
                record = lane[0][0]
                self._pauses.count((record.topic, record.partition), len(kept) - len(lane))

    def reposition(self, topic: str, partition: int, offset: int) -> None:
        """Read `partition` of `topic` from `offset` on (a seek), with nothing of it buffered."""
        tp = (topic, partition)
        lane = self._lanes.get((topic, partition))
        if lane:
            self._lanes[(topic, partition)] = deque()
        if self.ordered is not None:
            self.ordered.reposition(tp)
        self.consumer.incremental_unassign([TopicPartition(topic, partition)])
        self.consumer.incremental_assign([TopicPartition(topic, partition, offset)])
        self.committed[tp] = offset
        self._handed.pop(tp, None)
        self._pauses.forget(tp)

    def partitions_of(self, topic: str) -> list[tuple[str, int]]:
        """The partitions this shard reads for pops of `topic`: its own and the retry topic's."""
        wanted = (topic, self.retry_topic)
        return [(tp.topic, tp.partition) for tp in list(self.assignment) if tp.topic in wanted]

    def next_offset(self, topic: str, partition: int) -> int:
        """Where this partition's next record for the lanes is: after the last one the consumer
        handed over, else where reading started (OFFSET_BEGINNING when no offset was
        committed)."""
        handed = self._handed.get((topic, partition))
        if handed is not None:
            return handed
        start = self.committed.get((topic, partition), -1)
        return start if start >= 0 else OFFSET_BEGINNING

    def fetch(self, until: dict[tuple[str, int], int] | None = None, wait_s: float = 0) -> set[str]:
        """Move what the consumer has prefetched into lanes. Blocks only for the records of
        `until` ((topic, partition) -> offset, records another consumer saw there), up to
        `wait_s`. Returns the origin topics that got records (a pop of one of them may find
        something now)."""
        arrived: set[str] = set()
        for _ in range(FETCH_CHUNKS):
            messages = self.consumer.consume(num_messages=FETCH_CHUNK, timeout=0)
            self._sort(messages, arrived)
            if len(messages) < FETCH_CHUNK:
                break
        if until:
            deadline = time.monotonic() + wait_s
            while (left := deadline - time.monotonic()) > 0 and self._behind(until):
                self._sort(consume_ready(self.consumer, FETCH_CHUNK, left), arrived)
        if self.ordered is not None:  # records read may wait for their key: what is ready
            arrived |= self.look_at_ordered()
        return arrived

    def _behind(self, until: dict[tuple[str, int], int]) -> bool:
        return any(self._handed.get(tp, -1) <= offset for tp, offset in until.items())

    def _sort(self, messages: list[Message], arrived: set[str]) -> None:
        """Copy the records into their lanes: the core sorts a consume's messages into runs of
        one lane, so the work here is per run, not per record."""
        for origin, lane, partition, run in lane_runs(messages, self.retry_topic, UNTRUSTED):
            tp = (run[0][0].topic, partition)
            self._handed[tp] = run[-1][0].offset + 1
            key = (lane, partition)
            if self.ordered is not None and "/" not in lane:
                # every record: its lane says what is done (arrivals: `look_at_ordered`)
                self._pauses.count(tp, self.ordered.add(key, run))
                continue
            floor = self._last_leased(key)  # leased before a restart: the ledger has it
            if run[0][0].offset <= floor:
                run = [pair for pair in run if pair[0].offset > floor]
            stamp = self.seek_stamps.get(origin, 0)
            if stamp and "/" in lane:  # retry copies made before the origin's latest seek
                read = len(run)
                run = [pair for pair in run if not seek_stamps.made_before(pair[0], stamp)]
                self.skipped |= len(run) < read
            if not run:
                continue
            fetched = self._lanes.get(key)
            if fetched is None:
                fetched = self._lanes[key] = deque()
                self._by_origin.setdefault(origin, []).append(key)
            fetched.extend(run)
            self._pauses.count(tp, len(run))
            arrived.add(origin)

    def take(self, topic: str, limit: int) -> list[tuple[LaneKey, Fetched]]:
        """Up to `limit` records for pops of `topic`, retries first (they waited longest)."""
        taken: list[tuple[LaneKey, Fetched]] = []
        for key in sorted(self._by_origin.get(topic, ()), key=lambda k: "/" not in k[0]):
            lane, before = self._lanes[key], len(taken)
            while lane and len(taken) < limit:
                taken.append((key, lane.popleft()))
            if len(taken) > before:  # a lane holds records of one partition
                record = taken[-1][1][0]
                self._pauses.count((record.topic, record.partition), before - len(taken))
        if self.ordered is not None:  # kept until done: counted then (`look_at_ordered`)
            taken += self.ordered.take_for(topic, limit - len(taken), now_ms())
        return taken

    def look_at_ordered(self) -> set[str]:
        """Forget the records of ordered lanes whose message is done, and count what they
        could hand out now; the topics whose lanes could hand out more than before."""
        if self.ordered is None:
            return set()
        for key in self.ordered.lanes():
            self._pauses.count(key, -self.ordered.drop_done(key))
        return self.ordered.count_ready(now_ms())

    def available(self, topic: str, retries: bool | None = None) -> int:
        """Buffered records for pops of `topic`: retry copies, originals, or (None) both. Called
        from the event loop while the service thread may drop lanes: a lane gone counts 0."""
        lanes = self._by_origin.get(topic, ())
        buffered = sum(
            len(self._lanes.get(key, ()))
            for key in lanes
            if retries is None or ("/" in key[0]) == retries
        )
        if self.ordered is None or retries:
            return buffered
        return buffered + self.ordered.ready_for(topic)

    def unread(self, topic: str) -> bool:
        """Has the consumer fetched records for pops of `topic` that it has not handed over yet?
        Its position (past a transaction's marker too) against its last fetch's high watermark:
        no call to the broker. Called from any thread."""
        wanted = [tp for tp in list(self.assignment) if tp.topic in (topic, self.retry_topic)]
        for tp in self.consumer.position(wanted) if wanted else ():
            low, high = self.consumer.get_watermark_offsets(tp, cached=True)
            at = tp.offset if tp.offset >= 0 else self.next_offset(tp.topic, tp.partition)
            if high > max(at, low, 0):
                return True
        return False

    def cursor(self, topic: str, partition: int) -> int:
        """The next offset of this partition not yet handed out (buffered ones included)."""
        heads = [
            lane[0][0].offset
            for (name, p), lane in self._lanes.items()
            if p == partition and lane and source_topic(name) == topic
        ]
        position = self.consumer.position([TopicPartition(topic, partition)])[0].offset
        return min([*heads, position]) if position >= 0 else min(heads, default=-1)

    def unpopped_origins(self) -> list[str]:
        """Origins with retry copies buffered here that no pop here reads, and not known deleted
        (a pop may still ask for them; `GroupFetchers.orphaned_origins` asks whether they exist)."""
        skip = self.topics | self.deleted | {UNTRUSTED}
        return [
            origin
            for origin, keys in self._by_origin.items()
            if origin not in skip and any(self._lanes.get(key) for key in keys)
        ]

    def remove_topics(self, gone: set[str]) -> None:
        """Stop reading deleted topics and forget what was buffered of them. Their retry copies
        stay: they are in the retry topic, which still exists, and are dead-lettered."""
        self.deleted |= gone
        dropped = [tp for tp in self.assignment if tp.topic in gone]
        if dropped:
            self.consumer.incremental_unassign(dropped)
        self.assignment = [tp for tp in self.assignment if tp.topic not in gone]
        self.topics -= gone
        # The index first, then the lanes: a reader on another thread never finds a key the
        # index names missing from the lanes (`available`).
        self._by_origin = {
            origin: [key for key in keys if source_topic(key[0]) not in gone]
            for origin, keys in self._by_origin.items()
        }
        for key in [key for key in self._lanes if source_topic(key[0]) in gone]:
            del self._lanes[key]
        if self.ordered is not None:
            self.ordered.forget_topics(gone)
        for held in (self.committed, self._handed):
            for tp in [tp for tp in held if tp[0] in gone]:
                del held[tp]
        self._pauses.forget_topics(gone)

    def close(self) -> None:
        self.consumer.close()
