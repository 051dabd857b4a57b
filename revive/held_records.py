"""The records a pop leader handed out, held so a retry or dead-letter copy needs no Kafka read.

Leases keep offsets only (`revive.ledger`), and a copy needs the message again. Reading it back
(`revive.reader`: assign, fetch, unassign, per partition) ran inside the pop step, so every pop
and ack of the shard waited while a nack or an expired lease was copied. The leader keeps what
it handed out instead: the fetched record from its lease until its delivery is settled. Kafka
records never change, so a held record is never stale. It is bounded by bytes, oldest first:
what does not fit (long leases on a busy shard) and what was leased before a takeover is read
back as before.
"""

from __future__ import annotations

from collections import OrderedDict

import msgspec
from confluent_kafka import Message

from foundation.record_size import record_bytes
from revive.pop_state import LedgerKey

ENTRY_OVERHEAD_BYTES = 250  # the struct, its key tuple and the ordered dict's node, roughly
Place = tuple[LedgerKey, int]  # (group, lane, partition), offset


class HeldRecord(msgspec.Struct, gc=False):
    """What a copy needs of a fetched record, read through the same methods as a
    `confluent_kafka.Message`, so the copier takes either. Not tracked by the garbage collector
    (its fields are atoms and tuples of atoms), like the delay service's schedules."""

    _topic: str
    _partition: int
    _offset: int
    _key: bytes | None
    _value: bytes | None
    _headers: tuple[tuple[str, bytes | None], ...]
    _timestamp: tuple[int, int]
    size: int  # what holding it costs, counted once

    @classmethod
    def of(cls, message: Message) -> HeldRecord:
        headers = tuple(message.headers() or ())
        key, value = message.key(), message.value()
        size = ENTRY_OVERHEAD_BYTES + record_bytes(key, value, headers)
        return cls(
            message.topic() or "", message.partition() or 0, message.offset() or 0,
            key, value, headers, message.timestamp(), size,
        )  # fmt: skip

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> tuple[tuple[str, bytes | None], ...]:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return self._timestamp


Readable = Message | HeldRecord  # what the copier can copy from


class HeldRecords:
    def __init__(self, budget_bytes: int) -> None:
        self._budget = budget_bytes
        self._held: OrderedDict[Place, HeldRecord] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._held)

    def keep(self, key: LedgerKey, message: Message) -> None:
        """Hold a record just leased, making room by dropping the oldest ones."""
        record = HeldRecord.of(message)
        self.drop(key, record.offset())
        size = record.size
        if size > self._budget:
            return
        while self.bytes + size > self._budget:
            _, oldest = self._held.popitem(last=False)
            self.bytes -= oldest.size
        self._held[(key, record.offset())] = record
        self.bytes += size

    def get(self, key: LedgerKey, offset: int) -> HeldRecord | None:
        return self._held.get((key, offset))

    def drop(self, key: LedgerKey, offset: int) -> None:
        record = self._held.pop((key, offset), None)
        if record is not None:
            self.bytes -= record.size
