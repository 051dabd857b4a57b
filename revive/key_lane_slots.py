"""What the lease book of an ordered lane (`revive.key_lane`) keeps of each offset it holds.

A slot is made when its record is read, or when a replayed checkpoint names the offset first:
its key is then `UNKNOWN` until the record is read again.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto


class State(Enum):
    AVAILABLE = auto()  # to be leased once `available_at_ms` has come and it heads its key
    LEASED = auto()
    DONE = auto()  # acked or dead-lettered


class UnknownKey:
    """The key of an offset a replayed checkpoint names before the record is read again."""


UNKNOWN = UnknownKey()
Key = bytes | None  # None: the record has no key


@dataclass(slots=True)
class Slot:
    key: Key | UnknownKey
    state: State = State.AVAILABLE
    deliveries: int = 0  # how many times it was leased
    available_at_ms: int = 0
    checkpoint_id: int = 0  # its last lease's
    deadline_ms: int = 0
    reported: bool = False  # its lease's expiry was handed out by `expired`
    acked: bool = False
