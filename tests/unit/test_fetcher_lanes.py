"""GroupFetcher's lanes as another thread sees them while a deleted topic's lanes go, and the
retry copies a seek ends dropped from them."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any, cast

import pytest
from test_seek_stamps import copy_of

from revive.copies import provenance
from revive.fetcher import GroupFetcher
from revive.lanes import UNTRUSTED, Fetched, LaneKey, lane_name
from revive.source_record import SourceRecord

RETRY = "kpd.retry.g"


class Interleaving(dict[LaneKey, deque[Fetched]]):
    """Lanes that let a reader in at every deletion, as the event loop may be between two."""

    def __init__(self, lanes: dict[LaneKey, deque[Fetched]], reader: Any) -> None:
        super().__init__(lanes)
        self.reader = reader
        self.seen: list[int] = []

    def __delitem__(self, key: LaneKey) -> None:
        super().__delitem__(key)
        self.seen.append(self.reader())


@pytest.fixture
def fetcher() -> Iterator[GroupFetcher]:
    made = GroupFetcher(
        "g", RETRY, {"bootstrap.servers": "127.0.0.1:1"}, lambda key: -1, lambda t, p: True
    )
    yield made
    made.close()


def buffered(fetcher: GroupFetcher, lanes: dict[LaneKey, int]) -> None:
    fetcher._lanes = {key: deque(cast(Fetched, None) for _ in range(n)) for key, n in lanes.items()}
    fetcher._by_origin = {}
    for key in lanes:
        fetcher._by_origin.setdefault(key[0].split("/", 1)[-1], []).append(key)


def test_a_reader_between_two_dropped_lanes_counts_what_is_left(fetcher: GroupFetcher) -> None:
    # Two partitions of a deleted topic, a retry lane of it, and a topic that stays.
    buffered(
        fetcher,
        {("orders", 0): 2, ("orders", 1): 3, (lane_name(RETRY, "orders"), 0): 1, ("kept", 0): 4},
    )
    lanes = Interleaving(fetcher._lanes, lambda: fetcher.available("orders"))
    fetcher._lanes = lanes
    fetcher.remove_topics({"orders"})
    # The index drops the deleted topic's lanes before they go: a reader sees them gone at once
    # (never a KeyError); the retry lane (its source is the retry topic) stays.
    assert lanes.seen == [1, 1]
    assert fetcher.available("orders") == 1
    assert fetcher.available("kept") == 4
    assert fetcher.deleted == {"orders"}  # its retry copies are dead-lettered from now on


def test_unpopped_origins_are_those_with_retry_copies_no_pop_here_reads(
    fetcher: GroupFetcher,
) -> None:
    buffered(
        fetcher,
        {
            (lane_name(RETRY, "orders"), 0): 2,  # copies of a topic nobody pops here
            (lane_name(RETRY, "kept"), 0): 1,  # popped here
            (lane_name(RETRY, "drained"), 0): 0,  # nothing buffered
            (lane_name(RETRY, UNTRUSTED), 0): 1,  # dead-lettered anyway
        },
    )
    fetcher.topics = {"kept", RETRY}
    assert fetcher.unpopped_origins() == ["orders"]
    fetcher.deleted.add("orders")
    assert fetcher.unpopped_origins() == []


def test_a_later_stamp_drops_the_buffered_copies_made_before_it(fetcher: GroupFetcher) -> None:
    retry_lane, origin_lane = (lane_name(RETRY, "orders"), 0), ("orders", 0)
    copies = [copy_of(offset, stamp) for offset, stamp in [(1, 0), (2, 100), (3, 200), (4, 0)]]
    original = SourceRecord("orders", 0, 9, None, b"v", (), 1)
    found = provenance(copies[0], RETRY)
    fetcher._lanes = {
        retry_lane: deque((copy, found) for copy in copies),
        origin_lane: deque([(original, provenance(original, RETRY))]),
    }
    fetcher._by_origin = {"orders": [retry_lane, origin_lane]}
    fetcher._pauses.buffered = {(RETRY, 0): 4, ("orders", 0): 1}
    fetcher.raise_stamp("orders", 100)
    assert [pair[0].offset for pair in fetcher._lanes[retry_lane]] == [2, 3]
    assert fetcher._pauses.buffered[(RETRY, 0)] == 2
    assert fetcher.available("orders") == 3  # originals are the seek's to move, not the stamp's
    fetcher.raise_stamp("orders", 50)  # an earlier stamp changes nothing
    assert fetcher.seek_stamps["orders"] == 100
    assert fetcher.available("orders", retries=True) == 2
