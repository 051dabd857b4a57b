"""The records a pop leader handed out, held so a retry or dead-letter copy needs no Kafka read.

Leases keep offsets only (`revive.ledger`), and a copy needs the message again. Reading it back
(`revive.reader`: assign, fetch, unassign, per partition) ran inside the pop step, so every pop
and ack of the shard waited while a nack or an expired lease was copied. The leader keeps what
it handed out instead: the fetched record itself, from its lease until its delivery is settled.
Kafka records never change, so a held record is never stale. It is bounded by bytes: what does
not fit (long leases on a busy shard) and what was leased before a takeover is read back as
before.

Holding is on the path of every pop and ack, so it is kept cheap: one insertion-ordered dict of
offsets per ledger (no tuple key to build and hash per record), and the record as fetched (an
untracked struct, `revive.source_record`: no copy), which knows its size.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from revive.pop_state import LedgerKey
from revive.source_record import SourceRecord

# What a pop leader holds per shard (`HeldRecords`' budget): some 50k leases of 300-byte records.
HELD_RECORD_BYTES = 16 * 1024 * 1024
ENTRY_OVERHEAD_BYTES = 250  # the record's struct, its dict slot and the ints, roughly
Place = tuple[LedgerKey, int]  # (group, lane, partition), offset


def held_bytes(record: SourceRecord) -> int:
    """What holding a record costs, roughly; the same for the same record every time."""
    return ENTRY_OVERHEAD_BYTES + record.size


class HeldRecords:
    """Held records by ledger and offset. Past the budget, the ledger held longest (without a
    break) gives up its oldest records first."""

    def __init__(self, budget_bytes: int) -> None:
        self._budget = budget_bytes
        self._ledgers: dict[LedgerKey, OrderedDict[int, SourceRecord]] = {}
        self.bytes = 0

    def __len__(self) -> int:
        return sum(map(len, self._ledgers.values()))

    def keep(self, key: LedgerKey, records: Iterable[SourceRecord]) -> None:
        """Hold records of one ledger just leased, making room by dropping the oldest ones."""
        held = self._ledgers.get(key)
        if held is None:
            held = self._ledgers[key] = OrderedDict()
        for record in records:
            offset, size = record.offset, ENTRY_OVERHEAD_BYTES + record.size  # `held_bytes`
            replaced = held.pop(offset, None)
            if replaced is not None:
                self.bytes -= held_bytes(replaced)
            if size <= self._budget:
                held[offset] = record
                self.bytes += size
        while self.bytes > self._budget:
            self._drop_oldest()
        if not held:
            self._ledgers.pop(key, None)

    def get(self, key: LedgerKey, offset: int) -> SourceRecord | None:
        held = self._ledgers.get(key)
        return None if held is None else held.get(offset)

    def drop(self, places: Iterable[Place]) -> None:
        """Stop holding the records of settled deliveries (those not held change nothing)."""
        ledgers = self._ledgers
        for key, offset in places:
            held = ledgers.get(key)
            if held is None:
                continue
            record = held.pop(offset, None)
            if record is not None:
                self.bytes -= ENTRY_OVERHEAD_BYTES + record.size  # `held_bytes`, inline
            if not held:  # a ledger held again later goes to the back of the eviction order
                del ledgers[key]

    def _drop_oldest(self) -> None:
        key, held = next(iter(self._ledgers.items()))
        _, record = held.popitem(last=False)
        self.bytes -= held_bytes(record)
        if not held:
            del self._ledgers[key]
