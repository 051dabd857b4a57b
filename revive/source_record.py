"""A record of a popped topic (or a group's retry topic) as the pop leader keeps it.

A pop leader holds many records: up to 5,000 fetched ones per partition in its lanes, and those
it handed out until their delivery is settled (`revive.held_records`). confluent-kafka's `Message`
is an object the garbage collector tracks, so held messages reached its oldest generation and
every full collection walked them all: with Python's default thresholds, collections took 14% of
a worker's CPU at pop batches of 1,000 (BENCHMARKS.md, 2026-11-25 19:49). Copied into this
untracked struct as it is fetched (or read back), each `Message` is freed at once and the
collector never sees the record.
"""

from __future__ import annotations

import msgspec
from confluent_kafka import Message

Header = tuple[str, bytes | None]


class SourceRecord(msgspec.Struct, frozen=True, gc=False):
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]  # as produced, kpd's own included
    timestamp_ms: int

    @classmethod
    def of(cls, message: Message) -> SourceRecord:
        headers = message.headers()
        return cls(
            message.topic(),
            message.partition(),
            message.offset(),
            message.key(),
            message.value(),
            tuple(headers) if headers else (),
            message.timestamp()[1],
        )
