"""Receipt codec: the opaque, signed handle a worker gets with each popped message.

A receipt names exactly one delivery of one message: the (group, topic, partition, offset) of the
Kafka record that was handed out, the checkpoint (pop batch / lease) that handed it out, and the
delivery count. Workers pass it back to ack, nack, extend or reject.

Wire format (version 1), base64url without padding::

    0x01 || msgpack([group_fp, topic, partition, offset, checkpoint_id, delivery_count]) || tag

* ``group_fp`` = HMAC-SHA256(secret, "kpd-receipt-group" || group)[:8]. The group itself is not
  embedded (group names may be 249 multi-byte characters, which would not fit the 512-char limit);
  the keyed fingerprint still lets ``decode`` tell "receipt of another group" apart from a forgery.
* ``tag`` = HMAC-SHA256(secret, "kpd-receipt" || everything before the tag)[:16].

``ReceiptCodec.decode`` is total on hostile input: anything that is not a receipt this codec
issued for this group raises ``InvalidReceipt`` (a ``ValueError``) and nothing else.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from dataclasses import dataclass

import msgpack

MAX_RECEIPT_CHARS = 512
MIN_SECRET_BYTES = 16
MAX_CACHED_GROUPS = 10_000

_VERSION = 1
_TAG_BYTES = 16
_GROUP_FP_BYTES = 8
_TAG_DOMAIN = b"kpd-receipt\x00"
_GROUP_DOMAIN = b"kpd-receipt-group\x00"
_MAX_UINT64 = 2**64 - 1
_BASE64URL = re.compile(r"[A-Za-z0-9_-]+")


class InvalidReceipt(ValueError):
    """A receipt that this codec did not issue for this group (or that was altered)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Receipt:
    """One delivery of one message; ``topic`` is the topic it was read from (origin or retry)."""

    group: str
    topic: str
    partition: int
    offset: int
    checkpoint_id: int
    delivery_count: int


def _is_uint(value: object) -> bool:
    # bool is an int subclass; a True offset is a type error, not offset 1.
    return type(value) is int and 0 <= value <= _MAX_UINT64


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


class ReceiptCodec:
    """Encodes and verifies receipts with one shared secret (``KPD_RECEIPT_SECRET``)."""

    def __init__(self, secret: bytes) -> None:
        if not isinstance(secret, bytes) or len(secret) < MIN_SECRET_BYTES:
            raise ValueError(f"receipt secret must be at least {MIN_SECRET_BYTES} bytes")
        self._secret = secret
        self._group_fps: dict[str, bytes] = {}  # one HMAC per group, not one per receipt

    def _mac(self, domain: bytes, data: bytes) -> bytes:
        return hmac.new(self._secret, domain + data, hashlib.sha256).digest()

    def _group_fp(self, group: str) -> bytes:
        fp = self._group_fps.get(group)
        if fp is None:
            # surrogatepass: any str must hash, so a hostile group name cannot raise UnicodeError.
            data = group.encode("utf-8", "surrogatepass")
            fp = self._mac(_GROUP_DOMAIN, data)[:_GROUP_FP_BYTES]
            if len(self._group_fps) < MAX_CACHED_GROUPS:  # hostile names must not grow it
                self._group_fps[group] = fp
        return fp

    def encode(self, r: Receipt) -> str:
        """Return the receipt string; ``ValueError`` if a field is malformed or it is too long."""
        if not isinstance(r.group, str) or not isinstance(r.topic, str) or not r.topic:
            raise ValueError("receipt group and topic must be strings, topic non-empty")
        numbers = (r.partition, r.offset, r.checkpoint_id, r.delivery_count)
        if not all(_is_uint(n) for n in numbers):
            raise ValueError(f"receipt numbers must be non-negative ints: {numbers}")
        try:
            packed = msgpack.packb([self._group_fp(r.group), r.topic, *numbers])
        except UnicodeEncodeError as exc:
            raise ValueError("receipt topic is not valid unicode") from exc
        body = bytes([_VERSION]) + packed
        text = _b64(body + self._mac(_TAG_DOMAIN, body)[:_TAG_BYTES])
        if len(text) > MAX_RECEIPT_CHARS:
            # Kafka topic names are at most 249 ASCII chars, which always fit; this only
            # triggers for names Kafka itself would refuse.
            raise ValueError(f"receipt would be {len(text)} chars, over {MAX_RECEIPT_CHARS}")
        return text

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
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (binascii.Error, ValueError) as exc:
            raise InvalidReceipt("receipt is not base64url") from exc
        # Several strings differ only in the unused low bits of the last char yet decode to the
        # same bytes; accepting only the canonical one means every altered string is refused.
        if _b64(raw) != text:
            raise InvalidReceipt("receipt is not canonical base64url")
        if len(raw) <= 1 + _TAG_BYTES:
            raise InvalidReceipt("receipt is too short")
        body, tag = raw[:-_TAG_BYTES], raw[-_TAG_BYTES:]
        if body[0] != _VERSION:
            raise InvalidReceipt(f"unknown receipt version {body[0]}")
        if not hmac.compare_digest(tag, self._mac(_TAG_DOMAIN, body)[:_TAG_BYTES]):
            raise InvalidReceipt("receipt signature does not match")
        try:
            fields = msgpack.unpackb(body[1:], raw=False)
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise InvalidReceipt("receipt payload is undecodable") from exc
        if not isinstance(fields, list) or len(fields) != 6:
            raise InvalidReceipt("receipt payload has the wrong shape")
        group_fp, topic, partition, offset, checkpoint_id, delivery_count = fields
        if not isinstance(group_fp, bytes) or not isinstance(topic, str) or not topic:
            raise InvalidReceipt("receipt payload has wrong field types")
        if not all(_is_uint(n) for n in (partition, offset, checkpoint_id, delivery_count)):
            raise InvalidReceipt("receipt numbers must be non-negative ints")
        if not hmac.compare_digest(group_fp, self._group_fp(group)):
            raise InvalidReceipt("receipt belongs to another group")
        return Receipt(group, topic, partition, offset, checkpoint_id, delivery_count)
