"""A record of a popped topic (or a group's retry topic) as the pop leader keeps it.

A pop leader holds many records: up to 5,000 fetched ones per partition in its lanes, and those
it handed out until their delivery is settled (`revive.held_records`). confluent-kafka's `Message`
is an object the garbage collector tracks, and held messages made every full collection walk
them all. Each is copied into a `SourceRecord` of the compiled core as it is fetched (or read
back), which the collector does not track, and the `Message` is freed at once.

`SourceRecord(topic, partition, offset, key, value, headers, timestamp_ms)`, or
`SourceRecord.of(message)`; `headers` is a tuple of (name, value) pairs as produced, kpd's own
included, and `size` is the record's `foundation.record_size.record_bytes`, computed once.
"""

from __future__ import annotations

from kpd_core import SourceRecord

Header = tuple[str, bytes | None]

__all__ = ["Header", "SourceRecord"]
