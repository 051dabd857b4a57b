"""Receipt codec version 2: one signature per segment of a pop batch, each receipt still bound
to one offset and delivery count of that batch; and version 1 receipts still decode."""

import base64
import hashlib
import hmac
from itertools import accumulate

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from revive.receipt import (
    MAX_BATCH_MESSAGES,
    MAX_CACHED_SEGMENTS,
    MAX_RECEIPT_CHARS,
    InvalidReceipt,
    Receipt,
    ReceiptCodec,
)

SECRET = b"s" * 32
CODEC = ReceiptCodec(SECRET)
GROUP, TOPIC, PARTITION, CHECKPOINT = "orders-workers", "orders", 3, 42
BATCH = (GROUP, TOPIC, PARTITION, CHECKPOINT)
UINT64_MAX = 2**64 - 1
# Issued by the version-1 codec (main before version 2) for
# Receipt("orders-workers", "orders", 3, 1_234_567, 42, 2) with SECRET: a rolling upgrade must
# keep such in-flight receipts valid.
ISSUED_BY_V1 = "AZbECEWlQ2rG6McLpm9yZGVycwPOABLWhyoCXZaxiTeSO1Qdkhv86K8SGA"
# Version 2 of offsets 7, 8, 10 (counts 1, 1, 2) of BATCH: the format is fixed once issued.
ISSUED_BY_V2 = [
    "AgAAlcQIRaVDasboxwumb3JkZXJzAyqWBwIBAQECJe6Wn3pVTZZ-qa0eScOTtA",
    "AgABlcQIRaVDasboxwumb3JkZXJzAyqWBwIBAQECJe6Wn3pVTZZ-qa0eScOTtA",
    "AgAClcQIRaVDasboxwumb3JkZXJzAyqWBwIBAQECJe6Wn3pVTZZ-qa0eScOTtA",
]
GAPPED = ([7, 8, 10], [1, 1, 2])


def _expected(offsets: list[int], counts: list[int], batch=BATCH) -> list[Receipt]:
    group, topic, partition, checkpoint_id = batch
    pairs = zip(offsets, counts, strict=True)
    return [Receipt(group, topic, partition, o, checkpoint_id, c) for o, c in pairs]


def _run_count(offsets: list[int], counts: list[int]) -> int:
    """Runs of consecutive offsets with one count: where the format says a run must start."""
    starts = [i for i in range(1, len(offsets)) if offsets[i] != offsets[i - 1] + 1]
    changes = [i for i in range(1, len(offsets)) if counts[i] != counts[i - 1]]
    return 1 + len(set(starts) | set(changes))


def _segment_bytes(text: str) -> bytes:
    return base64.urlsafe_b64decode(text[4:] + "=" * (-len(text[4:]) % 4))


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _head(position: int, version: int = 2) -> str:
    return _b64(bytes([version]) + position.to_bytes(2, "big"))


def _fp(group: str) -> bytes:
    return hmac.new(SECRET, b"kpd-receipt-group\x00" + group.encode(), hashlib.sha256).digest()[:8]


def _forge(segment: bytes, position: int = 0, secret: bytes = SECRET) -> str:
    """A correctly signed version-2 receipt around any segment, to reach the checks after it."""
    tag = hmac.new(secret, b"kpd-receipt\x00\x02" + segment, hashlib.sha256).digest()[:16]
    return _head(position) + _b64(segment + tag)


@st.composite
def batches(draw):
    first = draw(st.integers(min_value=0, max_value=2**63))
    # Mostly consecutive offsets, some gaps (transaction markers), rarely a huge one.
    steps = st.sampled_from([1, 1, 1, 1, 2, 3]) | st.integers(min_value=1, max_value=2**40)
    offsets = list(accumulate(draw(st.lists(steps, max_size=120)), initial=first))
    count = st.sampled_from([1, 1, 1, 2, 16]) | st.integers(min_value=0, max_value=0xFFFF)
    counts = draw(st.lists(count, min_size=len(offsets), max_size=len(offsets)))
    return offsets, counts


@given(batch=batches(), topic=st.sampled_from(["t", TOPIC, "x" * 249]))
def test_batches_round_trip_with_one_signature_per_segment(batch, topic):
    offsets, counts = batch
    key = (GROUP, topic, PARTITION, CHECKPOINT)
    texts = CODEC.encode_batch(*key, offsets, counts)
    assert [CODEC.decode(t, group=GROUP) for t in texts] == _expected(offsets, counts, key)
    assert len(set(texts)) == len(texts)
    assert all(len(t) <= MAX_RECEIPT_CHARS for t in texts)
    segments = len({t[4:] for t in texts})
    runs = _run_count(offsets, counts)
    if topic == "x" * 249:  # a long topic leaves less room: segments may hold fewer runs
        assert -(-runs // 8) <= segments <= runs
    else:
        assert segments == -(-runs // 8)


def test_a_contiguous_batch_of_1000_is_signed_once_and_verified_once():
    codec = ReceiptCodec(SECRET)
    offsets, counts = list(range(5000, 6000)), [1] * 1000
    texts = codec.encode_batch(*BATCH, offsets, counts)
    assert codec.tags_computed == 1
    other_node = ReceiptCodec(SECRET)  # a fresh cache, as after a failover
    assert [other_node.decode(t, group=GROUP) for t in texts] == _expected(offsets, counts)
    assert other_node.tags_computed == 1


def test_receipt_length_does_not_grow_with_the_batch():
    one = CODEC.encode_batch(*BATCH, [5000], [1])
    thousand = CODEC.encode_batch(*BATCH, range(5000, 6000), [1] * 1000)
    # Only the run's length field grows (1000 takes 3 msgpack bytes, 1 takes 1).
    assert {len(t) for t in thousand} == {len(one[0]) + 3}
    # Every other offset (one-record transactions): 8 runs per segment, never 1000 offsets.
    gapped = CODEC.encode_batch(*BATCH, range(5000, 7000, 2), [1] * 1000)
    assert len({t[4:] for t in gapped}) == 125
    assert max(len(t) for t in gapped) < 2 * len(one[0])


def test_issued_version_2_receipts_decode_and_the_format_is_fixed():
    assert CODEC.encode_batch(*BATCH, *GAPPED) == ISSUED_BY_V2
    assert [CODEC.decode(t, group=GROUP) for t in ISSUED_BY_V2] == _expected(*GAPPED)


def test_version_1_receipts_issued_before_the_upgrade_still_decode():
    assert CODEC.decode(ISSUED_BY_V1, group=GROUP) == Receipt(GROUP, TOPIC, 3, 1_234_567, 42, 2)
    assert CODEC.encode(Receipt(GROUP, TOPIC, 3, 1_234_567, 42, 2)) == ISSUED_BY_V1


def _flips(text: str):
    """Every single-bit change of the string, and of its bytes (re-encoded canonically)."""
    for pos, char in enumerate(text):
        for bit in range(8):
            yield text[:pos] + chr(ord(char) ^ (1 << bit)) + text[pos + 1 :]
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    for pos in range(len(raw)):
        for bit in range(8):
            altered = bytearray(raw)
            altered[pos] ^= 1 << bit
            yield _b64(bytes(altered))


def test_no_bit_flip_makes_a_receipt_that_was_not_issued():
    # The position is not signed: a flip may name another message of the same segment, and
    # must then be exactly that message's receipt. Anything else is refused.
    texts = CODEC.encode_batch(*BATCH, *GAPPED)
    issued = dict(zip(texts, _expected(*GAPPED), strict=True))
    siblings = 0
    for text in texts:
        for flipped in _flips(text):
            try:
                decoded = CODEC.decode(flipped, group=GROUP)
            except InvalidReceipt:
                continue
            assert flipped in issued and issued[flipped] == decoded
            siblings += 1
    assert siblings > 0  # position flips do reach siblings, so the check above ran


@pytest.mark.parametrize("position", [3, 4, 255, 4096, 0xFFFF])
def test_a_position_outside_the_batch_is_refused(position):
    text = CODEC.encode_batch(*BATCH, *GAPPED)[0]
    with pytest.raises(InvalidReceipt, match="outside its batch"):
        CODEC.decode(_head(position) + text[4:], group=GROUP)


@pytest.mark.parametrize(
    "alter",
    [
        lambda f: f.__setitem__(1, "payments"),  # another topic
        lambda f: f.__setitem__(2, 4),  # another partition
        lambda f: f.__setitem__(3, 41),  # another checkpoint
        lambda f: f.__setitem__(4, [7, 5, 1]),  # a wider batch: positions 3, 4 would be valid
        lambda f: f.__setitem__(4, [6, 2, 1, 1, 1, 2]),  # other offsets
        lambda f: f.__setitem__(4, [7, 2, 3, 1, 1, 2]),  # another delivery count
        lambda f: f.__setitem__(0, _fp("someone-else")),  # another group
    ],
)
def test_an_altered_signed_part_is_refused(alter):
    text = CODEC.encode_batch(*BATCH, *GAPPED)[0]
    raw = _segment_bytes(text)
    fields = msgpack.unpackb(raw[:-16])
    alter(fields)
    altered = _head(0) + _b64(msgpack.packb(fields) + raw[-16:])
    with pytest.raises(InvalidReceipt, match="signature"):
        CODEC.decode(altered, group=GROUP)


def test_other_secret_and_other_group_are_refused_even_after_a_cached_decode():
    text = CODEC.encode_batch(*BATCH, *GAPPED)[1]
    assert CODEC.decode(text, group=GROUP).offset == 8  # now cached
    with pytest.raises(InvalidReceipt, match="another group"):
        CODEC.decode(text, group="someone-else")
    with pytest.raises(InvalidReceipt, match="signature"):
        ReceiptCodec(b"o" * 32).decode(text, group=GROUP)


def test_truncated_extended_and_relabelled_receipts_are_refused():
    text = CODEC.encode_batch(*BATCH, *GAPPED)[2]
    CODEC.decode(text, group=GROUP)  # cached: the cache must not accept near misses
    bad = [text[:n] for n in range(len(text))] + [text + x for x in ("A", "AA", "AAAA", "=")]
    bad += [_head(2, version=1) + text[4:], text[:4] + text[5:], text[:4] + "A" + text[4:]]
    for value in bad:
        with pytest.raises(InvalidReceipt):
            CODEC.decode(value, group=GROUP)


def test_non_canonical_base64_is_refused():
    text = CODEC.encode_batch(*BATCH, *GAPPED)[0]
    raw = _segment_bytes(text)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    variants = [text[:-1] + c for c in alphabet if c != text[-1]]
    same_bytes = [v for v in variants if _segment_bytes(v) == raw]
    assert same_bytes  # this segment length leaves unused bits in the last char
    for variant in same_bytes:
        with pytest.raises(InvalidReceipt, match="canonical"):
            CODEC.decode(variant, group=GROUP)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        (b"\xc1", "undecodable"),
        (msgpack.packb({"a": 1}), "shape"),
        (msgpack.packb([_fp("g"), "t", 0, 1]), "shape"),
        (msgpack.packb([_fp("g"), "t", 0, 1, [0, 1, 1], 5]), "shape"),
        (msgpack.packb([_fp("g"), b"t", 0, 1, [0, 1, 1]]), "types"),
        (msgpack.packb([_fp("g"), "", 0, 1, [0, 1, 1]]), "types"),
        (msgpack.packb(["fp", "t", 0, 1, [0, 1, 1]]), "types"),
        (msgpack.packb([_fp("g"), "t", -1, 1, [0, 1, 1]]), "non-negative"),
        (msgpack.packb([_fp("g"), "t", 0, True, [0, 1, 1]]), "non-negative"),
        (msgpack.packb([_fp("g"), "t", 0, 1, 7]), "shape"),
        (msgpack.packb([_fp("g"), "t", 0, 1, []]), "shape"),
        (msgpack.packb([_fp("g"), "t", 0, 1, [0, 1]]), "shape"),
        (msgpack.packb([_fp("g"), "t", 0, 1, [0, 1, 1] * 9]), "shape"),
        (msgpack.packb([_fp("g"), "t", 0, 1, [0, 1, -1]]), "non-negative"),
        (msgpack.packb([_fp("g"), "t", 0, 1, [0, 1.5, 1]]), "non-negative"),
        (msgpack.packb([_fp("g"), "t", 0, 1, [0, 0, 1]]), "not offsets"),
        (msgpack.packb([_fp("g"), "t", 0, 1, [UINT64_MAX, 2, 1]]), "not offsets"),
        (msgpack.packb([_fp("g"), "t", 0, 1, [UINT64_MAX, 1, 1, 0, 1, 1]]), "not offsets"),
        (msgpack.packb([_fp("g"), "t", 0, 1, [0, 1, 1]]) + b"\x00", "undecodable"),
    ],
)
def test_signed_but_malformed_segments_are_refused(fields, reason):
    with pytest.raises(InvalidReceipt, match=reason):
        CODEC.decode(_forge(fields), group="g")


def test_forge_helper_matches_the_codec():
    # Guards the test above: a well-formed forged segment is accepted, so rejections are real.
    segment = msgpack.packb([_fp("g"), "t", 0, 9, [UINT64_MAX, 1, 3]])
    assert CODEC.decode(_forge(segment), group="g") == Receipt("g", "t", 0, UINT64_MAX, 9, 3)


def test_the_cache_of_verified_segments_is_bounded_and_keeps_forgeries_out():
    codec = ReceiptCodec(SECRET)
    forged = _forge(msgpack.packb([_fp("g"), "t", 0, 1, [0, 1, 1]]), secret=b"o" * 32)
    for i in range(2000):
        with pytest.raises(InvalidReceipt):
            codec.decode(forged[:-3] + _b64(i.to_bytes(3, "big"))[:3], group="g")
    assert codec.cached_segments == 0
    for cp in range(MAX_CACHED_SEGMENTS + 10):
        [text] = codec.encode_batch("g", "t", 0, cp, [cp], [1])
        assert codec.decode(text, group="g") == Receipt("g", "t", 0, cp, cp, 1)
        assert 0 < codec.cached_segments <= MAX_CACHED_SEGMENTS
    assert codec.cached_segments == 10  # it was emptied when full, then refilled


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (("g", "t", 0, 1, [], []), "1.."),
        (("g", "t", 0, 1, [1, 2], [1]), "1.."),
        (("g", "t", 0, 1, range(MAX_BATCH_MESSAGES + 1), [1] * (MAX_BATCH_MESSAGES + 1)), "1.."),
        (("g", "t", 0, 1, [2, 1], [1, 1]), "increasing"),
        (("g", "t", 0, 1, [1, 1], [1, 1]), "increasing"),
        (("g", "t", 0, 1, [-1], [1]), "non-negative"),
        (("g", "t", 0, 1, [True], [1]), "non-negative"),
        (("g", "t", 0, 1, [UINT64_MAX + 1], [1]), "non-negative"),
        (("g", "t", 0, 1, [1], [-1]), "non-negative"),
        (("g", "t", -1, 1, [1], [1]), "non-negative"),
        (("g", "t", 0, True, [1], [1]), "non-negative"),
        (("g", "", 0, 1, [1], [1]), "topic"),
        ((None, "t", 0, 1, [1], [1]), "topic"),
        (("g", "t" * 400, 0, 1, [1], [1]), "over"),
        (("g", "t\ud800", 0, 1, [1], [1]), "unicode"),
    ],
)
def test_encode_batch_refuses_malformed_batches(args, match):
    with pytest.raises(ValueError, match=match):
        CODEC.encode_batch(*args)


def test_a_long_topic_with_far_apart_runs_splits_segments_instead_of_failing():
    offsets = [i * 2**50 for i in range(16)]
    texts = CODEC.encode_batch("g", "x" * 249, 0, UINT64_MAX, offsets, [0xFFFF] * 16)
    assert all(len(t) <= MAX_RECEIPT_CHARS for t in texts)
    assert len({t[4:] for t in texts}) > 2  # 16 runs would be 2 segments with a short topic
    assert [CODEC.decode(t, group="g").offset for t in texts] == offsets
