"""Where a redrive of one dead-letter partition stands, as the offset it commits.

Every dead letter below `next` has been moved back or passed for good; of those at or above it,
the offsets in `moved` went back too. A redrive with a topic filter leaves the dead letters of
other topics, so its position stops at the first one it left, and what it moved beyond goes in
`moved`, written as the committed offset's metadata ("a-b,c-d": inclusive ranges).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Kafka keeps at most this much metadata per committed offset (offset.metadata.max.bytes).
METADATA_MAX_BYTES = 4096


@dataclass
class RedrivePosition:
    next: int
    moved: list[tuple[int, int]] = field(default_factory=list)  # sorted, disjoint, >= next
    _left: int | None = None  # the first offset this redrive left behind

    @classmethod
    def decode(cls, offset: int, metadata: str | None) -> RedrivePosition:
        """The committed position; a metadata string kpd did not write counts as none."""
        moved: list[tuple[int, int]] = []
        for part in (metadata or "").split(","):
            first, _, last = part.partition("-")
            if not (first.isdigit() and last.isdigit() and int(first) <= int(last)):
                return cls(offset)
            moved.append((int(first), int(last)))
        moved.sort()
        return cls(offset, [(a, b) for a, b in moved if b >= offset])

    def encode(self) -> str:
        return ",".join(f"{first}-{last}" for first, last in self.moved)

    def is_moved(self, offset: int) -> bool:
        return any(first <= offset <= last for first, last in self.moved)

    def moved_one(self, offset: int) -> None:
        """`offset` went back; records come in offset order, so it extends the last range or
        opens one."""
        if self._left is None:
            self.next = offset + 1
            self.moved = [(a, b) for a, b in self.moved if b > offset]
        elif self.moved and self.moved[-1][1] == offset - 1:
            self.moved[-1] = (self.moved[-1][0], offset)
        else:
            self.moved.append((offset, offset))
            self.moved.sort()

    def passed(self, offset: int) -> None:
        """`offset` needs no redrive (already moved, or not kpd's): the position may pass it."""
        if self._left is None:
            self.next = offset + 1
            self.moved = [(a, b) for a, b in self.moved if b > offset]

    def left(self, offset: int) -> None:
        """`offset` stays in the DLQ (another topic's, or past the redrive's count)."""
        if self._left is None:
            self._left = self.next = offset

    def fits(self) -> bool:
        """Can the position still be committed (its metadata within Kafka's limit)?"""
        return len(self.encode()) < METADATA_MAX_BYTES - 64
