"""A popped topic deleted while its lanes are read: the lanes go, on the shard's thread.

Nothing of a deleted topic can be fetched, settled or committed again, and its offsets would fail
the transaction that sent them: its lanes' ledgers, buffered records and offsets to commit are
dropped. Its retry copies stay in the group's retry topic, which still exists: leases on them
settle as any others, and the copies are dead-lettered as they are read, since no pop can ask for
them (`Leaser.dead_letter_unpoppable`). So are the buffered retry copies of any topic that no
longer exists, deleted while no fetcher here read it or before this leader started.
"""

from __future__ import annotations

import time

import structlog

from revive.group_fetchers import GroupFetchers
from revive.lanes import source_topic
from revive.offsets import OffsetCommitter
from revive.pop_state import PopState
from revive.pop_step import Unwritten
from revive.wake_times import FLOOR_EVERY_S

log = structlog.get_logger(__name__)


class DeletedTopics:
    def __init__(
        self,
        fetchers: GroupFetchers,
        state: PopState,
        unwritten: Unwritten,
        offsets: OffsetCommitter,
    ) -> None:
        self._fetchers, self._state = fetchers, state
        self._unwritten, self._offsets = unwritten, offsets
        self._checked_at = 0.0  # when the fetched topics were last seen to exist

    def look(self) -> None:
        """At most once a second, before anything is revived: one metadata request per fetched
        topic (however many groups pop it)."""
        if time.monotonic() - self._checked_at < FLOOR_EVERY_S:
            return
        self._checked_at = time.monotonic()
        for group, gone in self._fetchers.deleted_topics().items():
            self.drop(group, gone)
        for group, origins in self._fetchers.orphaned_origins().items():
            self._fetchers.by_group[group].deleted |= origins
            log.warning("retry copies of a deleted topic", group=group, topics=sorted(origins))

    def drop(self, group: str, gone: set[str]) -> None:
        """The lanes of `group` read from the topics `gone`."""
        fetcher = self._fetchers.by_group.get(group)
        if fetcher is None or not (gone := gone & fetcher.topics):
            return
        fetcher.remove_topics(gone)
        state = self._state
        dropped = {k for k in state.ledgers if k[0] == group and source_topic(k[1]) in gone}
        state.drop(dropped)
        self._unwritten.forget(dropped)
        self._offsets.forget(group, gone)
        log.warning("dropped the lanes of a deleted topic", group=group, topics=sorted(gone))
