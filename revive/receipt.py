"""Receipt codec: the opaque, signed handle a worker gets with each popped message.

A receipt names exactly one delivery of one message: the (group, topic, partition, offset) of the
Kafka record handed out, the checkpoint (pop batch / lease) that handed it out, and the delivery
count. Workers pass it back to ack, nack, extend or reject. Text: base64url without padding of a
version byte and the rest; ``decode`` reads both versions.

Version 2 (``encode_batch``), one signature per segment of a pop batch::

    0x02 || position (2 bytes) || segment || tag
    segment = msgpack([group_fp, topic, partition, checkpoint_id, [skip, length, count, ...]])
    tag     = HMAC-SHA256(secret, "kpd-receipt" || 0x02 || segment)[:16]

A segment lists up to 8 runs: ``length`` consecutive offsets starting ``skip`` after the previous
run (the first skip is its offset), all delivered ``count`` times. A contiguous batch of equal
counts (a pop of an origin topic) is one run: one HMAC for the batch; gaps (transaction markers)
and count changes start runs. Counts are signed rather than looked up, so a receipt stays
self-contained. The position, the message's index in its segment, is not signed; a position past
the runs is refused, so every receipt that decodes names an offset and count exactly as leased
(a worker holding one receipt of a segment can name its siblings, which the pop caller got too).
Version byte and position are 4 whole base64 chars, so the rest is the segment's own text:
encoded once per segment, verified once per distinct text (a bounded cache of verified ones).

Version 1 (``encode``, one HMAC per receipt; still decoded, so receipts issued before an upgrade
stay valid)::

    0x01 || msgpack([group_fp, topic, partition, offset, checkpoint_id, delivery_count]) || tag
    tag = HMAC-SHA256(secret, "kpd-receipt" || everything before the tag)[:16]

``group_fp`` = HMAC-SHA256(secret, "kpd-receipt-group" || group)[:8]. The group itself is not
embedded (group names may be 249 multi-byte characters, which would not fit the 512-char limit);
the keyed fingerprint still lets ``decode`` tell "receipt of another group" apart from a forgery.

``ReceiptCodec.decode`` is total on hostile input: anything that is not a receipt this codec
issued for this group raises ``InvalidReceipt`` (a ``ValueError``) and nothing else.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Sequence
from itertools import pairwise

import msgpack
import msgspec

MAX_RECEIPT_CHARS = 512
MIN_SECRET_BYTES = 16
MAX_CACHED_GROUPS = 10_000
MAX_CACHED_SEGMENTS = 4096  # verified segments; more than the 1000 receipts of one call
MAX_BATCH_MESSAGES = 2**16  # positions are two bytes

_V1, _V2 = 1, 2
_TAG_BYTES = 16
_GROUP_FP_BYTES = 8
_HEAD_CHARS = 4  # base64 of version + position: whole 3-byte groups, so nothing straddles it
_MAX_RUNS = 8
_TAG_DOMAIN = b"kpd-receipt\x00"
_GROUP_DOMAIN = b"kpd-receipt-group\x00"
_MAX_UINT64 = 2**64 - 1
_BASE64URL = re.compile(r"[A-Za-z0-9_-]+")
# 12 bits <-> 2 base64url chars: the 4-char head in two lookups each way, not a base64 call.
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]
_PAIR_BITS = {pair: bits for bits, pair in enumerate(_PAIRS)}
_CHAR_BITS = {char: bits for bits, char in enumerate(_ALPHABET)}
_UNUSED_BITS = {2: 0xF, 3: 0x3}  # chars after the last whole group -> bits the last one wastes

Run = tuple[int, int, int]  # (first offset, length, delivery count)


class InvalidReceipt(ValueError):
    """A receipt that this codec did not issue for this group (or that was altered)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Receipt(msgspec.Struct, frozen=True, gc=False):
    """One delivery of one message; ``topic`` is the topic it was read from (origin or retry)."""

    group: str
    topic: str
    partition: int
    offset: int
    checkpoint_id: int
    delivery_count: int


class _Segment(msgspec.Struct, frozen=True, gc=False):
    """The verified, signed part of version-2 receipts."""

    group_fp: bytes
    topic: str
    partition: int
    checkpoint_id: int
    runs: tuple[Run, ...]

    def locate(self, position: int) -> tuple[int, int]:
        """(offset, delivery count) of the message at ``position``."""
        for first, length, count in self.runs:
            if position < length:
                return first + position, count
            position -= length
        raise InvalidReceipt("receipt position is outside its batch")


def _is_uint(value: object) -> bool:
    # bool is an int subclass; a True offset is a type error, not offset 1.
    return type(value) is int and 0 <= value <= _MAX_UINT64


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    """Bytes of base64url ``text`` (already matched by ``_BASE64URL``), canonical only."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise InvalidReceipt("receipt is not base64url") from exc
    # Several strings differ only in the unused low bits of the last char yet decode to the
    # same bytes; accepting only the canonical one means every altered string is refused.
    if _CHAR_BITS[text[-1]] & _UNUSED_BITS.get(len(text) % 4, 0):
        raise InvalidReceipt("receipt is not canonical base64url")
    return raw


def _unpack(body: bytes) -> object:
    try:
        return msgpack.unpackb(body, raw=False)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise InvalidReceipt("receipt payload is undecodable") from exc


def _check_names(group: object, topic: object) -> None:
    if not isinstance(group, str) or not isinstance(topic, str) or not topic:
        raise ValueError("receipt group and topic must be strings, topic non-empty")


def _runs(offsets: Sequence[int], counts: Sequence[int]) -> list[Run]:
    runs: list[Run] = []
    for offset, count in zip(offsets, counts, strict=True):
        if runs:
            first, length, last_count = runs[-1]
            if offset == first + length and count == last_count:
                runs[-1] = (first, length + 1, count)
                continue
        runs.append((offset, 1, count))
    return runs


def _parse_runs(flat: object) -> tuple[Run, ...]:
    if not isinstance(flat, list) or not flat or len(flat) % 3 or len(flat) > 3 * _MAX_RUNS:
        raise InvalidReceipt("receipt payload has the wrong shape")
    if not all(_is_uint(n) for n in flat):
        raise InvalidReceipt("receipt numbers must be non-negative ints")
    runs: list[Run] = []
    cursor = 0
    for i in range(0, len(flat), 3):
        skip, length, count = flat[i : i + 3]
        first, cursor = cursor + skip, cursor + skip + length
        if length == 0 or cursor - 1 > _MAX_UINT64:
            raise InvalidReceipt("receipt runs are not offsets")
        runs.append((first, length, count))
    return tuple(runs)


class ReceiptCodec:
    """Encodes and verifies receipts with one shared secret (``KPD_RECEIPT_SECRET``)."""

    def __init__(self, secret: bytes) -> None:
        if not isinstance(secret, bytes) or len(secret) < MIN_SECRET_BYTES:
            raise ValueError(f"receipt secret must be at least {MIN_SECRET_BYTES} bytes")
        self._secret = secret
        self._group_fps: dict[str, bytes] = {}  # one HMAC per group, not one per receipt
        self._segments: dict[str, _Segment] = {}  # segment text -> verified segment

    def _tag(self, body: bytes) -> bytes:
        return hmac.new(self._secret, _TAG_DOMAIN + body, hashlib.sha256).digest()[:_TAG_BYTES]

    def _group_fp(self, group: str) -> bytes:
        fp = self._group_fps.get(group)
        if fp is None:
            # surrogatepass: any str must hash, so a hostile group name cannot raise UnicodeError.
            data = _GROUP_DOMAIN + group.encode("utf-8", "surrogatepass")
            fp = hmac.new(self._secret, data, hashlib.sha256).digest()[:_GROUP_FP_BYTES]
            if len(self._group_fps) < MAX_CACHED_GROUPS:  # hostile names must not grow it
                self._group_fps[group] = fp
        return fp

    def _pack(self, fields: list[object]) -> bytes:
        try:
            return msgpack.packb(fields)
        except UnicodeEncodeError as exc:
            raise ValueError("receipt topic is not valid unicode") from exc

    def encode(self, r: Receipt) -> str:
        """One receipt in version 1 (an HMAC of its own): what kpd issued before version 2, and
        what nodes older than it can read. ``ValueError`` if a field is malformed or too long."""
        _check_names(r.group, r.topic)
        numbers = (r.partition, r.offset, r.checkpoint_id, r.delivery_count)
        if not all(_is_uint(n) for n in numbers):
            raise ValueError(f"receipt numbers must be non-negative ints: {numbers}")
        body = bytes([_V1]) + self._pack([self._group_fp(r.group), r.topic, *numbers])
        text = _b64(body + self._tag(body))
        if len(text) > MAX_RECEIPT_CHARS:
            # Kafka topic names are at most 249 ASCII chars, which always fit; this only
            # triggers for names Kafka itself would refuse.
            raise ValueError(f"receipt would be {len(text)} chars, over {MAX_RECEIPT_CHARS}")
        return text

    def encode_batch(
        self,
        group: str,
        topic: str,
        partition: int,
        checkpoint_id: int,
        offsets: Sequence[int],
        counts: Sequence[int],
    ) -> list[str]:
        """Version-2 receipts of one checkpoint's messages, in order, one HMAC per segment;
        ``ValueError`` if a field is malformed, offsets do not increase or a receipt is too long."""
        _check_names(group, topic)
        if not 0 < len(offsets) <= MAX_BATCH_MESSAGES or len(offsets) != len(counts):
            raise ValueError(f"a batch needs 1..{MAX_BATCH_MESSAGES} offsets, one count each")
        numbers = (partition, checkpoint_id, *offsets, *counts)
        if not all(_is_uint(n) for n in numbers):
            raise ValueError("receipt numbers must be non-negative ints")
        if any(b <= a for a, b in pairwise(offsets)):
            raise ValueError("batch offsets must be strictly increasing")
        head: list[object] = [self._group_fp(group), topic, partition, checkpoint_id]
        runs = _runs(offsets, counts)
        texts: list[str] = []
        for i in range(0, len(runs), _MAX_RUNS):
            texts += self._segment_texts(head, runs[i : i + _MAX_RUNS])
        return texts

    def _segment_texts(self, head: list[object], runs: list[Run]) -> list[str]:
        flat: list[int] = []
        cursor = 0
        for first, length, count in runs:
            flat += (first - cursor, length, count)
            cursor = first + length
        body = bytes([_V2]) + self._pack([*head, flat])
        segment = _b64(body[1:] + self._tag(body))
        if _HEAD_CHARS + len(segment) > MAX_RECEIPT_CHARS:
            if len(runs) == 1:  # as in version 1, only names Kafka would refuse get here
                raise ValueError(f"receipt would be over {MAX_RECEIPT_CHARS} chars")
            half = len(runs) // 2  # long topic and far-apart runs: fewer runs per segment
            return self._segment_texts(head, runs[:half]) + self._segment_texts(head, runs[half:])
        size = sum(length for _, length, _ in runs)
        heads = (_V2 << 16 | position for position in range(size))
        return [_PAIRS[head >> 12] + _PAIRS[head & 0xFFF] + segment for head in heads]

    def decode(self, text: object, *, group: str) -> Receipt:
        """Verify ``text`` and return its receipt; ``InvalidReceipt`` on anything else."""
        if not isinstance(text, str):
            raise InvalidReceipt("receipt must be a string")
        if not text:
            raise InvalidReceipt("receipt is empty")
        if len(text) > MAX_RECEIPT_CHARS:
            raise InvalidReceipt(f"receipt is longer than {MAX_RECEIPT_CHARS} chars")
        if not isinstance(group, str):
            raise InvalidReceipt("group must be a string")
        if _BASE64URL.fullmatch(text) is None:
            raise InvalidReceipt("receipt is not base64url")
        if len(text) <= _HEAD_CHARS:
            raise InvalidReceipt("receipt is too short")
        head = _PAIR_BITS[text[:2]] << 12 | _PAIR_BITS[text[2:_HEAD_CHARS]]
        version = head >> 16
        if version == _V1:
            return self._decode_v1(text, group)
        if version != _V2:
            raise InvalidReceipt(f"unknown receipt version {version}")
        segment = self._segments.get(text[_HEAD_CHARS:]) or self._verify(text[_HEAD_CHARS:])
        if not hmac.compare_digest(segment.group_fp, self._group_fp(group)):
            raise InvalidReceipt("receipt belongs to another group")
        offset, count = segment.locate(head & 0xFFFF)
        return Receipt(
            group, segment.topic, segment.partition, offset, segment.checkpoint_id, count
        )

    def _verify(self, text: str) -> _Segment:
        """Check a version-2 segment's signature and shape, and remember it."""
        group_fp, topic, partition, checkpoint_id, flat = self._open(bytes([_V2]) + _unb64(text), 5)
        if not (_is_uint(partition) and _is_uint(checkpoint_id)):
            raise InvalidReceipt("receipt numbers must be non-negative ints")
        segment = _Segment(group_fp, topic, partition, checkpoint_id, _parse_runs(flat))
        if len(self._segments) >= MAX_CACHED_SEGMENTS:
            self._segments.clear()  # only signed segments get here; the bound is for memory
        self._segments[text] = segment
        return segment

    def _open(self, raw: bytes, size: int) -> list[object]:
        """The ``size`` fields of version byte || body || tag: signature, shape, name types."""
        if len(raw) <= 1 + _TAG_BYTES:
            raise InvalidReceipt("receipt is too short")
        body, tag = raw[:-_TAG_BYTES], raw[-_TAG_BYTES:]
        if not hmac.compare_digest(tag, self._tag(body)):
            raise InvalidReceipt("receipt signature does not match")
        fields = _unpack(body[1:])
        if not isinstance(fields, list) or len(fields) != size:
            raise InvalidReceipt("receipt payload has the wrong shape")
        if not isinstance(fields[0], bytes) or not isinstance(fields[1], str) or not fields[1]:
            raise InvalidReceipt("receipt payload has wrong field types")
        return fields

    def _decode_v1(self, text: str, group: str) -> Receipt:
        fields = self._open(_unb64(text), 6)
        group_fp, topic, partition, offset, checkpoint_id, delivery_count = fields
        if not all(_is_uint(n) for n in (partition, offset, checkpoint_id, delivery_count)):
            raise InvalidReceipt("receipt numbers must be non-negative ints")
        if not hmac.compare_digest(group_fp, self._group_fp(group)):
            raise InvalidReceipt("receipt belongs to another group")
        return Receipt(group, topic, partition, offset, checkpoint_id, delivery_count)
