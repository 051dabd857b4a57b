"""Seek stamps: which seek of a (group, topic) a retry copy was made after (docs/reference.md,
"Seek").

A seek of a group's topic ends every delivery made before it, and drops the retry copies those
deliveries left, wherever they are: in the retry topic, or still waiting in the delay service.
Each seek has a stamp, larger than any earlier seek's of the (group, topic); the group's committed
offsets of the topic carry the latest in their metadata, so every shard, and a new leader, knows
it. A copy carries the stamp its leader knew when it made the copy (`kpd-origin-seek`, none
before a first seek), and a copy stamped below the stamp its reader knows is dropped unread. A
leader that has not applied a seek yet stamps lower: its copies are of deliveries the seek ends.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import TopicPartition

from foundation.wire import ORIGIN_SEEK
from revive.source_record import SourceRecord

_PREFIX = "seek:"  # committed-offset metadata: `seek:<stamp>`
_MAX_DIGITS = 18  # a stamp fits 63 bits however hostile the header


def parse(text: str | bytes | None) -> int:
    """A stamp from its decimal text; 0 (before any seek) for anything else."""
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    if not text or len(text) > _MAX_DIGITS or not (text.isascii() and text.isdigit()):
        return 0
    return int(text)


def of_record(record: SourceRecord) -> int:
    """The stamp a retry copy carries (0: made before any seek of its origin)."""
    for name, value in record.headers:
        if name == ORIGIN_SEEK:
            return parse(value)
    return 0


def made_before(record: SourceRecord, stamp: int) -> bool:
    """Was this retry copy made before the seek of `stamp`?"""
    return of_record(record) < stamp


def header(stamp: int) -> list[tuple[str, bytes]]:
    """The header a copy made under `stamp` carries: none before a first seek."""
    return [(ORIGIN_SEEK, str(stamp).encode())] if stamp > 0 else []


def offset(topic: str, partition: int, at: int, stamp: int) -> TopicPartition:
    """An offset to commit that keeps `stamp` in its metadata (none before a first seek)."""
    if stamp > 0:
        return TopicPartition(topic, partition, at, metadata=f"{_PREFIX}{stamp}")
    return TopicPartition(topic, partition, at)


def of_committed(offsets: list[TopicPartition]) -> int:
    """The latest stamp among a topic's committed offsets (0: never sought)."""
    stamps = [
        parse(tp.metadata[len(_PREFIX) :])
        for tp in offsets
        if isinstance(tp.metadata, str) and tp.metadata.startswith(_PREFIX)
    ]
    return max(stamps, default=0)


def committed_stamp(consumer: Any, topic: str, timeout_s: float) -> int:
    """The latest stamp of `topic` in the committed offsets of `consumer`'s group."""
    partitions = consumer.list_topics(topic, timeout=timeout_s).topics[topic].partitions
    asked = [TopicPartition(topic, p) for p in sorted(partitions)]
    return of_committed(consumer.committed(asked, timeout=timeout_s)) if asked else 0
