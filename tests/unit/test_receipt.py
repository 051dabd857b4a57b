"""Receipt codec: round trip, tamper resistance, hostile input; version 1 (one HMAC per receipt)
and version 2 (one HMAC per segment of a pop batch)."""

import base64
import hashlib
import hmac

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from revive.receipt import MAX_RECEIPT_CHARS, InvalidReceipt, Receipt, ReceiptCodec

SECRET = b"s" * 32
CODEC = ReceiptCodec(SECRET)
KAFKA_TOPIC_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
UINT64 = st.integers(min_value=0, max_value=2**64 - 1)
SAMPLE = Receipt("orders-workers", "orders", 3, 1_234_567, 42, 2)


@given(
    group=st.text(max_size=249),
    topic=st.text(alphabet=KAFKA_TOPIC_CHARS, min_size=1, max_size=249),
    partition=st.integers(min_value=0, max_value=2**31 - 1),
    offset=UINT64,
    checkpoint_id=UINT64,
    delivery_count=UINT64,
)
def test_round_trip_kafka_topics(group, topic, partition, offset, checkpoint_id, delivery_count):
    r = Receipt(group, topic, partition, offset, checkpoint_id, delivery_count)
    text = CODEC.encode(r)
    assert len(text) <= MAX_RECEIPT_CHARS
    assert all(c in KAFKA_TOPIC_CHARS.replace(".", "") for c in text)  # URL and JSON safe
    assert CODEC.decode(text, group=group) == r


@given(group=st.text(max_size=249), topic=st.text(min_size=1, max_size=249))
def test_unicode_topic_round_trips_or_is_refused_at_encode(group, topic):
    r = Receipt(group, topic, 0, 7, 1, 1)
    try:
        text = CODEC.encode(r)
    except ValueError:
        # Only names Kafka would refuse anyway can push a receipt over the limit.
        assert len(topic.encode()) > 249
        return
    assert CODEC.decode(text, group=group) == r


def test_every_bit_flip_is_rejected():
    text = CODEC.encode(SAMPLE)
    for pos, char in enumerate(text):
        for bit in range(8):
            flipped = text[:pos] + chr(ord(char) ^ (1 << bit)) + text[pos + 1 :]
            with pytest.raises(InvalidReceipt):
                CODEC.decode(flipped, group=SAMPLE.group)


def test_every_payload_bit_flip_is_rejected():
    # Flip bits of the decoded bytes too (re-encoded canonically), so the HMAC must catch them.
    raw = base64.urlsafe_b64decode(CODEC.encode(SAMPLE) + "==")
    for pos in range(len(raw)):
        for bit in range(8):
            altered = bytearray(raw)
            altered[pos] ^= 1 << bit
            text = base64.urlsafe_b64encode(bytes(altered)).rstrip(b"=").decode()
            with pytest.raises(InvalidReceipt):
                CODEC.decode(text, group=SAMPLE.group)


def test_other_secret_is_rejected():
    text = ReceiptCodec(b"o" * 32).encode(SAMPLE)
    with pytest.raises(InvalidReceipt, match="signature"):
        CODEC.decode(text, group=SAMPLE.group)


def test_group_mismatch_is_rejected():
    text = CODEC.encode(SAMPLE)
    with pytest.raises(InvalidReceipt, match="another group"):
        CODEC.decode(text, group="someone-else")


def test_truncated_receipts_are_rejected():
    text = CODEC.encode(SAMPLE)
    for n in range(len(text)):
        with pytest.raises(InvalidReceipt):
            CODEC.decode(text[:n], group=SAMPLE.group)


@pytest.mark.parametrize(
    "value",
    [
        None,
        42,
        b"bytes",
        ["list"],
        "",
        "A" * (MAX_RECEIPT_CHARS + 1),
        "not base64!",
        "padded==",
        "a",
        "AAAA",
        "é" * 40,
        "\x00" * 10,
        "\ud800abc",
    ],
)
def test_garbage_is_rejected(value):
    with pytest.raises(InvalidReceipt):
        CODEC.decode(value, group="g")


def test_appended_characters_are_rejected():
    text = CODEC.encode(SAMPLE)
    for extra in ("A", "AA", "AAAA", "=", " ", "\n"):
        with pytest.raises(InvalidReceipt):
            CODEC.decode(text + extra, group=SAMPLE.group)


@given(st.text(max_size=600))
def test_arbitrary_strings_only_raise_invalid_receipt(text):
    with pytest.raises(InvalidReceipt):
        CODEC.decode(text, group="g")


def _forge(body: bytes, secret: bytes = SECRET) -> str:
    """A correctly signed receipt around an arbitrary body, to reach the checks after the tag."""
    tag = hmac.new(secret, b"kpd-receipt\x00" + body, hashlib.sha256).digest()[:16]
    return base64.urlsafe_b64encode(body + tag).rstrip(b"=").decode()


def _fp(group: str) -> bytes:
    return hmac.new(SECRET, b"kpd-receipt-group\x00" + group.encode(), hashlib.sha256).digest()[:8]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"\x03" + msgpack.packb([_fp("g"), "t", 0, 1, 1, 1]), "version"),
        (b"\x00" + msgpack.packb([_fp("g"), "t", 0, 1, 1, 1]), "version"),
        (b"\x01\xc1", "undecodable"),
        (b"\x01" + msgpack.packb({"a": 1}), "shape"),
        (b"\x01" + msgpack.packb([_fp("g"), "t", 0, 1, 1]), "shape"),
        (b"\x01" + msgpack.packb([_fp("g"), b"t", 0, 1, 1, 1]), "types"),
        (b"\x01" + msgpack.packb([_fp("g"), "", 0, 1, 1, 1]), "types"),
        (b"\x01" + msgpack.packb(["fp", "t", 0, 1, 1, 1]), "types"),
        (b"\x01" + msgpack.packb([_fp("g"), "t", -1, 1, 1, 1]), "non-negative"),
        (b"\x01" + msgpack.packb([_fp("g"), "t", 0, 1.5, 1, 1]), "non-negative"),
        (b"\x01" + msgpack.packb([_fp("g"), "t", 0, True, 1, 1]), "non-negative"),
        (b"\x01" + msgpack.packb([_fp("g"), "t", 0, 1, 1, 1]) + b"\x00", "undecodable"),
    ],
)
def test_signed_but_malformed_payloads_are_rejected(body, reason):
    with pytest.raises(InvalidReceipt, match=reason):
        CODEC.decode(_forge(body), group="g")


def test_forge_helper_matches_the_codec():
    # Guards the test above: a well-formed forged body is accepted, so rejections are real.
    body = b"\x01" + msgpack.packb([_fp("g"), "t", 0, 1, 2, 3])
    assert CODEC.decode(_forge(body), group="g") == Receipt("g", "t", 0, 1, 2, 3)


def test_invalid_receipt_is_a_value_error_with_reason():
    with pytest.raises(ValueError) as info:
        CODEC.decode("", group="g")
    assert isinstance(info.value, InvalidReceipt)
    assert info.value.reason == "receipt is empty"


@pytest.mark.parametrize("fields", [("g", "", 0, 0, 0, 0), ("g", "t" * 400, 0, 0, 0, 0)])
def test_encode_refuses_malformed_receipts(fields):
    with pytest.raises(ValueError):
        CODEC.encode(Receipt(*fields))


@pytest.mark.parametrize(
    "numbers", [(-1, 0, 0, 0), (0, -5, 0, 0), (0, 0, True, 0), (0, 0, 0, 2**64), (0, 0.5, 0, 0)]
)
def test_a_receipt_holds_only_uint64_numbers(numbers):
    with pytest.raises(ValueError, match="non-negative"):
        Receipt("g", "t", *numbers)


def test_short_secret_is_refused():
    with pytest.raises(ValueError):
        ReceiptCodec(b"short")
