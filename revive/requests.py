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


@dataclass(frozen=True)
class Produced:
    """A record an ack call produces, as its transaction writes it (a schedule goes to the
    buffer topic, `partition` one its shard reads), and what the call answers for it."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    partition: int | None
    answer: dict[str, Any]


@dataclass
class AckProduceRequest:
    """Ack every receipt and produce every record in one transaction, or change nothing
    (`revive.ack_produce`). `items`: (receipt text, its receipt, or None when it is not one);
    `digest` tells a retry of call `request_id` from another call with the same id."""

    group: str
    items: list[tuple[str, Receipt | None]]
    produce: list[Produced]
    request_id: str | None
    digest: str


@dataclass
class SeekRequest:
    """Move the group's position in every partition of `topic` this shard serves: to the
    `to` end ("earliest" or "latest"), or to the first offset at or after `time_ms`; `stamp`
    is the seek's (`revive.seek_stamps`)."""

    group: str
    topic: str
    to: str | None
    time_ms: int | None
    stamp: int


@dataclass
class ForgetRequest:
    """Forget the group here: its leases, what its fetcher buffered, its offsets to send."""

    group: str


@dataclass
class Look:
    """Move what the fetchers have into the lanes, and answer None: the lanes are read after
    (group stats), while a shard with no pop to serve may not have looked for a while."""


Request = PopRequest | SettleRequest | AckProduceRequest | SeekRequest | ForgetRequest | Look
