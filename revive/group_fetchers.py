"""A pop shard's fetchers, one per group that pops here: made on its first pop, or resumed for
the groups a new leader inherits, and rid of the topics deleted since.

Only the pop service thread changes them; HTTP handlers and the arrival watch read them
(`knows`, `available`, `watched`) from other threads, one reference at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import structlog

from foundation.config import Settings
from foundation.shards import ShardMap
from foundation.topics import TopicCache, TopicSpec, ensure_topics, with_message_limit
from revive.fetcher import GroupFetcher
from revive.inbox import Arrivals
from revive.lanes import UNTRUSTED, origin_topic
from revive.ordered_lanes import OrderedLanes
from revive.pop_state import PopState
from revive.resume import GroupResumer

log = structlog.get_logger(__name__)

RESUME_THREADS = 8  # inherited groups whose fetchers are made at once (`revive.resume`)
# After the arrival watch saw a record, how long a step waits for the fetcher's copy of it (it
# comes about as soon: the broker answers both consumers' held fetches together).
ARRIVAL_WAIT_S = 0.02
Watched = tuple[str, int, str, int]  # (topic, partition, group, offset its fetcher reached)


class GroupFetchers:
    def __init__(
        self,
        settings: Settings,
        clients: tuple[dict[str, Any], Any],  # the consumers' config, the admin client
        shard: tuple[ShardMap, int],  # the shard map, and the shard served here
        state: PopState,
        topic_cache: TopicCache,
        wake: Callable[[], None],  # the service's thread: an inherited group's fetcher is ready
    ) -> None:
        self._settings = settings
        self._client_config, self._admin = clients
        self._shards, self._shard = shard
        self._state, self._topic_cache = state, topic_cache
        self._timeout_s = settings.kafka_timeout_ms / 1000
        self.by_group: dict[str, GroupFetcher] = {}
        # The fetchers of the groups the replayed ledgers name, made off the service thread.
        self._resumer: GroupResumer[GroupFetcher] = GroupResumer(RESUME_THREADS, wake)

    # -- read from any thread --------------------------------------------------------------

    def watched(self, awaited: Iterable[tuple[str, str]]) -> list[Watched]:
        """The partitions read here for the awaited (group, topic)s, each with its group and
        the offset its fetcher has reached (`GroupFetcher.next_offset`)."""
        found: list[Watched] = []
        for group, topic in awaited:
            fetcher = self.by_group.get(group)
            if fetcher is not None and topic in fetcher.topics:
                partitions = fetcher.partitions_of(topic)
                found += [(t, p, group, fetcher.next_offset(t, p)) for t, p in partitions]
        return found

    def knows(self, group: str, topic: str) -> bool:
        """Has (group, topic) been asked for here, so that its lanes are read?"""
        fetcher = self.by_group.get(group)
        return fetcher is not None and topic in fetcher.topics

    def available(self, group: str, topic: str) -> int:
        """Records waiting for pops of (group, topic) here."""
        fetcher = self.by_group.get(group)
        return 0 if fetcher is None else fetcher.available(topic)

    def seek_stamp(self, group: str, topic: str) -> int:
        """The latest seek of (group, topic) known here (`revive.seek_stamps`)."""
        fetcher = self.by_group.get(group)
        return 0 if fetcher is None else fetcher.seek_stamps.get(topic, 0)

    def worth_asking(self, group: str, topic: str) -> bool:
        """Would a pop of (group, topic) find something here: records in the lanes, or read and
        not yet moved into them (the service moves them as it serves the pop)?"""
        fetcher = self.by_group.get(group)
        return fetcher is not None and (fetcher.available(topic) > 0 or fetcher.unread(topic))

    # -- the service thread ----------------------------------------------------------------

    def resume(self) -> None:
        """Fetch the groups the replayed ledgers name, before any worker asks for them: this
        leader may settle their leases (expiry) and must then move the group's offsets, or the
        replay floor could never pass their checkpoints (`PopState.floors`). Their fetchers are
        made in parallel (`revive.resume`), so a takeover answers at once however many groups
        there are. The ledgers of a deleted topic go, its retry lanes' too (a group left with
        no topic gets no fetcher here, so they would hold the floor for good); its retry copies
        read again are dead-lettered (`orphaned_origins`)."""
        inherited: dict[str, set[str]] = {}
        for group, lane, _ in self._state.ledgers:
            topic = origin_topic(lane)
            # A distrusted retry lane names no topic: any fetcher of its group reads its retry
            # topic.
            if topic != UNTRUSTED:
                inherited.setdefault(group, set()).add(topic)
        state = self._state
        for group, topics in inherited.items():
            for topic in sorted(t for t in topics if not self._topic_cache.exists(t)):
                topics.discard(topic)
                gone = (group, topic)
                state.drop({k for k in state.ledgers if (k[0], origin_topic(k[1])) == gone})
                log.warning("dropped the leases of a deleted topic", group=group, topic=topic)
        self._resumer.start({g: t for g, t in inherited.items() if t}, self._made)

    def install_resumed(self) -> bool:
        """Take in the inherited groups' fetchers made since the last call; any?"""
        return self._resumer.install_ready(self.by_group.__setitem__)

    def for_pop(self, group: str, topic: str) -> GroupFetcher:
        """The fetcher of `group`, reading `topic`: made (or waited for, if inherited and still
        being made) on the group's first pop here."""
        fetcher = self.by_group.get(group)
        if fetcher is None:
            # An inherited group still being made: its fetcher (each of its calls is bounded).
            fetcher = self._resumer.wait_for(group, 3 * self._timeout_s) or self._new(group)
            self.by_group[group] = fetcher
        if topic not in fetcher.topics:
            fetcher.add_topic(topic, self._timeout_s)
        return fetcher

    def look_at_ordered(self, on_available: Callable[[str, str], None]) -> None:
        """After a step of acks, releases and expiries: tell `on_available` of each (group,
        topic) whose lanes by key can hand out more now."""
        for group, fetcher in self.by_group.items():
            for topic in fetcher.look_at_ordered():
                on_available(group, topic)

    def forget(self, group: str) -> None:
        """The group was deleted: stop reading for it here (a later pop starts it afresh)."""
        fetcher = self.by_group.pop(group, None)
        if fetcher is not None:
            fetcher.close()

    def fetch_all(
        self, arrivals: Arrivals, fresh: bool, on_available: Callable[[str, str], None]
    ) -> tuple[bool, set[tuple[str, str, int]]]:
        """Move what every fetcher has into lanes; for the records the arrival watch saw
        (`arrivals`), wait up to ARRIVAL_WAIT_S if it saw some just now (`fresh`) until the
        fetcher has them too. (Did records arrive, the arrivals still to come.)"""
        wait_s = ARRIVAL_WAIT_S if fresh else 0.0
        until: dict[str, dict[tuple[str, int], int]] = {}
        for (group, topic, partition), offset in arrivals.items():
            until.setdefault(group, {})[(topic, partition)] = offset
        moved = False
        for group, fetcher in self.by_group.items():
            moved |= self.fetch(group, fetcher, on_available, until.get(group), wait_s)
        by_group = self.by_group
        behind = {
            (group, topic, partition)
            for (group, topic, partition), offset in arrivals.items()
            if group in by_group and by_group[group].next_offset(topic, partition) <= offset
        }
        return moved, behind

    @staticmethod
    def fetch(
        group: str,
        fetcher: GroupFetcher,
        on_available: Callable[[str, str], None],
        until: dict[tuple[str, int], int] | None = None,
        wait_s: float = 0.0,
    ) -> bool:
        """Move what `fetcher` has into lanes, telling `on_available` of each topic that got
        records; did any?"""
        arrived = fetcher.fetch(until, wait_s)
        for topic in arrived:
            on_available(group, topic)
        return bool(arrived)

    def take_skipping(self) -> set[str]:
        """The groups whose fetchers dropped retry copies made before a seek since the last
        call: their offsets may move with no step touching them."""
        skipping = {group for group, fetcher in self.by_group.items() if fetcher.skipped}
        for group in skipping:
            self.by_group[group].skipped = False
        return skipping

    def deleted_topics(self) -> dict[str, set[str]]:
        """The fetched topics deleted meanwhile, by group: one metadata request per fetched topic
        (however many groups pop it)."""
        fetched = {topic for fetcher in self.by_group.values() for topic in fetcher.topics}
        deleted = {topic for topic in fetched if not self._topic_cache.exists(topic)}
        return {g: f.topics & deleted for g, f in self.by_group.items() if f.topics & deleted}

    def orphaned_origins(self) -> dict[str, set[str]]:
        """By group, the origins of buffered retry copies whose topic does not exist (deleted
        while no fetcher here read it, or before this leader started): one metadata request per
        such origin, and none while every origin is popped here."""
        found: dict[str, set[str]] = {}
        for group, fetcher in self.by_group.items():
            for origin in fetcher.unpopped_origins():
                if not self._topic_cache.exists(origin):
                    found.setdefault(group, set()).add(origin)
        return found

    def close(self) -> None:
        self._resumer.close(GroupFetcher.close)
        for fetcher in self.by_group.values():
            fetcher.close()

    def _made(self, group: str, topics: set[str]) -> GroupFetcher:
        """(In a resumer thread.) A fetcher of `group` reading `topics`, not yet installed."""
        fetcher = self._new(group)
        try:
            for topic in sorted(topics):
                fetcher.add_topic(topic, self._timeout_s)
        except BaseException:
            fetcher.close()
            raise
        return fetcher

    def _new(self, group: str) -> GroupFetcher:
        group_settings = self._settings.group(group)
        assert group_settings.retry_topic and group_settings.dlq_topic
        limit = self._settings.max_record_bytes
        ensure_topics(
            self._admin,
            [
                with_message_limit(TopicSpec(group_settings.retry_topic), limit),
                with_message_limit(TopicSpec(group_settings.dlq_topic), limit),
            ],
            self._settings.topic_partitions,
            self._settings.topic_replication,
            self._timeout_s,
        )
        shards, shard, state = self._shards, self._shard, self._state
        ordered = None
        if group_settings.ordering == "key":
            ordered = OrderedLanes(lambda lane: state.key_lane((group, *lane)))
        return GroupFetcher(
            group,
            group_settings.retry_topic,
            self._client_config,
            lambda lane: state.last_leased.get((group, *lane), -1),
            lambda topic, partition: shards.of_lane(group, topic, partition) == shard,
            ordered,
        )
