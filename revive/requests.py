"""What HTTP handlers ask of the pop service; it answers each through a future."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from revive.receipt import Receipt


@dataclass
class PopRequest:
    """Lease what is there now (waiting for records is the router's job)."""

    group: str
    topic: str
    max_messages: int
    invisible_ms: int


@dataclass
class SettleRequest:
    """ack / nack / leases / reject: one kind, items of (receipt text, its verified receipt,
    argument)."""

    kind: str  # "ack" | "nack" | "leases" | "reject"
    group: str
    items: list[tuple[str, Receipt, Any]]


@dataclass
class Look:
    """Move what the fetchers have into the lanes, and answer None: the lanes are read after
    (group stats), while a shard with no pop to serve may not have looked for a while."""
