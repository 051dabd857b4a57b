"""Kafka state records that make a ``PartitionLedger`` durable: their encoding.

docs/principles.md, 1: every lease change is first a record in a kpd state topic. Three kinds:

* ``CheckpointRecord``: a pop batch was leased (``PartitionLedger.open_checkpoint``).
* ``AckRecord``: one delivery ended (ack, nack, reject, revive) with an ``Outcome``; for
  ``RELEASED`` (a lane ordered by key, `revive.key_lane`) ``at_ms`` is when the message may
  be leased again.
* ``DeadlineRecord``: one lease's deadline was changed.
* ``SeekRecord``: the group's position in the partition moved (`revive.seek`): every open lease
  ended, and pops go on from the new offset.
* ``ForgetRecord``: the group was deleted (`revive.forget`): the ledger and everything before
  it are gone.
* ``AnswerRecord``: an ack call with a ``request_id`` was answered (`revive.ack_produce`); a
  retry of the call within `revive.answered_calls`'s window answers the same.

Encoding: msgpack array ``[version, kind, group, topic, partition, checkpoint_id, ...]``. Offsets
are stored as the first offset plus deltas, and a contiguous batch as the first offset plus its
length. Ack records, one per settled delivery, are encoded by the compiled core
(`kpd_core.ack_records`: a ledger's acks of a call in one pass). Records of one ledger share
the key (group, topic, partition), so keying the state topic by it keeps them in order on one
partition.

Applying them to ledgers is `revive.ledger_replay`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import sub
from typing import Self

import msgpack
import msgspec
from kpd_core import ack_records as ack_records

from revive.ledger import Outcome

_VERSION = 1
_KIND_CHECKPOINT = 1
_KIND_ACK = 2
_KIND_DEADLINE = 3
_KIND_BATCH = 4
_KIND_SEEK = 5
_KIND_FORGET = 6
_KIND_ANSWER = 7

LedgerKey = tuple[str, str, int]  # (group, source topic, partition)


class InvalidStateRecord(ValueError):
    """Bytes that are not a state record this version understands."""


def _pack(kind: int, fields: list[object]) -> bytes:
    return msgpack.packb([_VERSION, kind, *fields])


def _unpack(data: bytes) -> tuple[int, list[object]]:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise InvalidStateRecord(f"state record must be bytes, got {type(data).__name__}")
    try:
        decoded = msgpack.unpackb(data, raw=False)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise InvalidStateRecord(f"undecodable state record: {exc}") from exc
    if not isinstance(decoded, list) or len(decoded) < 2:
        raise InvalidStateRecord("state record is not a versioned array")
    if decoded[0] != _VERSION:
        raise InvalidStateRecord(f"unknown state record version {decoded[0]!r}")
    return decoded[1], decoded[2:]


def _check(fields: list[object], shapes: frozenset[tuple[type, ...]], what: str) -> None:
    """The fields' exact types must be one of `shapes`: msgpack decodes to exact types, so a
    bool (an int subclass) never reads as offset 1. One pass in C: a hot standby checks every
    ack record of its shards."""
    if tuple(map(type, fields)) not in shapes:
        raise InvalidStateRecord(f"malformed {what} record: {fields!r}")


_CHECKPOINT_SHAPES = frozenset(
    (str, str, int, int, int, offsets, list, int, int) for offsets in (int, list)
)
_SETTLED_SHAPES = frozenset({(str, str, int, int, int, int, int)})  # ack and deadline records
_SEEK_SHAPES = frozenset({(str, str, int, int, int)})
_FORGET_SHAPES = frozenset({(str, str, int, int)})
_ANSWER_SHAPES = frozenset({(str, str, int, str, str, int, bytes)})
_OUTCOMES = {outcome.value: outcome for outcome in Outcome}


def _encode_offsets(offsets: Sequence[int]) -> int | list[int]:
    # Built-ins over the whole batch: no Python call per offset (a pop writes one per record).
    deltas = list(map(sub, offsets[1:], offsets[:-1]))
    if deltas and min(deltas) <= 0:
        raise ValueError("checkpoint record offsets must be strictly increasing")
    # A contiguous batch (the usual case) is stored as its length alone.
    return len(offsets) if not deltas or max(deltas) == 1 else deltas


def _decode_offsets(first: int, deltas: int | list[int]) -> tuple[int, ...]:
    if isinstance(deltas, int):
        return tuple(range(first, first + deltas))
    offsets = [first]
    for delta in deltas:
        if not isinstance(delta, int) or isinstance(delta, bool) or delta <= 0:
            raise InvalidStateRecord(f"bad offset delta {delta!r}")
        offsets.append(offsets[-1] + delta)
    return tuple(offsets)


class _LedgerRecord:
    """What every state record shares: the ledger it belongs to, and decoding."""

    __slots__ = ()
    group: str
    topic: str
    partition: int

    @property
    def key(self) -> LedgerKey:
        return (self.group, self.topic, self.partition)

    @classmethod
    def from_bytes(cls, data: bytes) -> Self:
        record = decode_record(data)
        if not isinstance(record, cls):
            raise InvalidStateRecord(f"expected a {cls.__name__}, got {type(record).__name__}")
        return record


class CheckpointRecord(msgspec.Struct, _LedgerRecord, frozen=True, gc=False):
    """A pop batch leased ``offsets`` of one partition until ``deadline_ms``."""

    group: str
    topic: str
    partition: int
    checkpoint_id: int
    offsets: tuple[int, ...]
    delivery_counts: tuple[int, ...]
    deadline_ms: int
    popped_at_ms: int

    def to_bytes(self) -> bytes:
        if not self.offsets or len(self.offsets) != len(self.delivery_counts):
            raise ValueError("a checkpoint record needs offsets and one count per offset")
        return _pack(
            _KIND_CHECKPOINT,
            [
                self.group,
                self.topic,
                self.partition,
                self.checkpoint_id,
                self.offsets[0],
                _encode_offsets(self.offsets),
                list(self.delivery_counts),
                self.deadline_ms,
                self.popped_at_ms,
            ],
        )


class AckRecord(msgspec.Struct, _LedgerRecord, frozen=True, gc=False):
    """One delivery ended with ``outcome`` at ``at_ms``."""

    group: str
    topic: str
    partition: int
    checkpoint_id: int
    offset: int
    outcome: Outcome
    at_ms: int

    def to_bytes(self) -> bytes:
        leases = [(self.checkpoint_id, self.offset)]
        return ack_records(self.key, leases, int(self.outcome), self.at_ms)[0]


class DeadlineRecord(msgspec.Struct, _LedgerRecord, frozen=True, gc=False):
    """One lease's deadline became ``deadline_ms``, decided at ``at_ms``."""

    group: str
    topic: str
    partition: int
    checkpoint_id: int
    offset: int
    deadline_ms: int
    at_ms: int

    def to_bytes(self) -> bytes:
        return _pack(
            _KIND_DEADLINE,
            [
                self.group,
                self.topic,
                self.partition,
                self.checkpoint_id,
                self.offset,
                self.deadline_ms,
                self.at_ms,
            ],
        )


class SeekRecord(msgspec.Struct, _LedgerRecord, frozen=True, gc=False):
    """The group's position in the partition moved to ``offset`` at ``at_ms``."""

    group: str
    topic: str
    partition: int
    offset: int
    at_ms: int

    def to_bytes(self) -> bytes:
        if self.offset < 0:
            raise ValueError("a seek record needs an offset >= 0")
        return _pack(_KIND_SEEK, [self.group, self.topic, self.partition, self.offset, self.at_ms])


class ForgetRecord(msgspec.Struct, _LedgerRecord, frozen=True, gc=False):
    """The group was deleted at ``at_ms``: this ledger is forgotten."""

    group: str
    topic: str
    partition: int
    at_ms: int

    def to_bytes(self) -> bytes:
        return _pack(_KIND_FORGET, [self.group, self.topic, self.partition, self.at_ms])


class AnswerRecord(msgspec.Struct, _LedgerRecord, frozen=True, gc=False):
    """The call `request_id` of `group` (`digest`: what it asked) was answered `answer` (JSON)
    at ``at_ms``; topic and partition are those of its first receipt, which place the record."""

    group: str
    topic: str
    partition: int
    request_id: str
    digest: str
    at_ms: int
    answer: bytes

    def to_bytes(self) -> bytes:
        return _pack(
            _KIND_ANSWER,
            [self.group, self.topic, self.partition, self.request_id, self.digest, self.at_ms,
             self.answer],
        )  # fmt: skip


StateRecord = (
    CheckpointRecord | AckRecord | DeadlineRecord | SeekRecord | ForgetRecord | AnswerRecord
)


def decode_record(data: bytes) -> StateRecord:
    """Decode any state record; ``InvalidStateRecord`` on anything else."""
    kind, f = _unpack(data)
    if kind == _KIND_CHECKPOINT:
        _check(f, _CHECKPOINT_SHAPES, "checkpoint")
        offsets = _decode_offsets(f[4], f[5])
        counts = f[6]
        if len(offsets) != len(counts) or not offsets:
            raise InvalidStateRecord("checkpoint record offsets and counts differ in length")
        if not all(type(c) is int for c in counts):  # exact, as in `_check`: no bool
            raise InvalidStateRecord("checkpoint record delivery counts must be ints")
        return CheckpointRecord(f[0], f[1], f[2], f[3], offsets, tuple(counts), f[7], f[8])
    if kind == _KIND_ACK:
        _check(f, _SETTLED_SHAPES, "ack")
        outcome = _OUTCOMES.get(f[5])
        if outcome is None:
            raise InvalidStateRecord(f"unknown outcome {f[5]!r}")
        return AckRecord(f[0], f[1], f[2], f[3], f[4], outcome, f[6])
    if kind == _KIND_DEADLINE:
        _check(f, _SETTLED_SHAPES, "deadline")
        return DeadlineRecord(*f)
    if kind == _KIND_SEEK:
        _check(f, _SEEK_SHAPES, "seek")
        if f[3] < 0:
            raise InvalidStateRecord(f"seek record offset {f[3]} is below 0")
        return SeekRecord(*f)
    if kind == _KIND_FORGET:
        _check(f, _FORGET_SHAPES, "forget")
        return ForgetRecord(*f)
    if kind == _KIND_ANSWER:
        _check(f, _ANSWER_SHAPES, "answer")
        return AnswerRecord(*f)
    raise InvalidStateRecord(f"unknown state record kind {kind!r}")


def pack_batch(encoded: Sequence[bytes]) -> bytes:
    """Several encoded records of one ledger as one Kafka value (one produce per ledger and
    transaction instead of one per ack: the records stay individually replayable)."""
    return msgpack.packb([_VERSION, _KIND_BATCH, list(encoded)])


def unpack_batch(data: bytes) -> list[StateRecord]:
    """The records of a `pack_batch` value, in order; ``InvalidStateRecord`` on anything else."""
    kind, fields = _unpack(data)
    if kind != _KIND_BATCH or len(fields) != 1 or not isinstance(fields[0], list):
        raise InvalidStateRecord("not a batch of state records")
    if not all(isinstance(item, bytes) for item in fields[0]):
        raise InvalidStateRecord("a state record batch holds bytes only")
    return [decode_record(item) for item in fields[0]]
