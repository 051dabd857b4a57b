"""Fetched records in the compiled core: SourceRecord, provenance of retry copies, lane runs."""

from __future__ import annotations

import gc
import itertools
from collections.abc import Iterator

import kpd_core
import pytest
from confluent_kafka import KafkaError, Message
from hypothesis import given
from hypothesis import strategies as st

from foundation import record_size
from revive.copies import (
    DELIVERY_COUNT,
    ORIGIN_OFFSET,
    ORIGIN_PARTITION,
    ORIGIN_TOPIC,
    Origin,
    Provenance,
    copy_headers,
    provenance,
)
from revive.fetcher import GroupFetcher
from revive.lanes import UNTRUSTED, lane_name
from revive.source_record import SourceRecord

RETRY = "kpd.retry.g"
names = st.sampled_from(["h", "kpd-id", ORIGIN_TOPIC, DELIVERY_COUNT]) | st.text(max_size=8)
headers = st.lists(st.tuples(names, st.none() | st.binary(max_size=40)), max_size=6)
topics = st.sampled_from(["orders", "a.b-c_d", "x" * 249])


def message(
    topic: str = "orders",
    offset: int = 0,
    hs: list[tuple[str, bytes | None]] | None = None,
    partition: int = 0,
    value: bytes | None = b"v",
) -> Message:
    return Message(
        topic=topic, partition=partition, offset=offset, key=None, value=value, headers=hs,
        timestamp=(1, 1_700_000_000_000 + offset),
    )  # fmt: skip


def retry(hs: list[tuple[str, bytes | None]]) -> SourceRecord:
    return SourceRecord.of(message(RETRY, 5, hs, partition=2))


def copied(topic: bytes = b"orders", partition: bytes = b"3", offset: bytes = b"7") -> list:
    return [
        (DELIVERY_COUNT, b"2"),
        (ORIGIN_TOPIC, topic),
        (ORIGIN_PARTITION, partition),
        (ORIGIN_OFFSET, offset),
    ]


@given(
    st.none() | st.binary(max_size=50),
    st.none() | st.binary(max_size=50),
    headers,
    st.integers(0, 2**40),
)
def test_a_record_is_its_message_whole_and_knows_its_size(
    key: bytes | None, value: bytes | None, hs: list, offset: int
) -> None:
    made = Message(
        topic="t", partition=3, offset=offset, key=key, value=value, headers=hs or None,
        timestamp=(1, 42),
    )  # fmt: skip
    record = SourceRecord.of(made)
    assert record == SourceRecord("t", 3, offset, key, value, tuple(hs), 42)
    assert record != SourceRecord("t", 3, offset + 1, key, value, tuple(hs), 42)
    assert record.size == record_size.record_bytes(key, value, hs)
    assert not gc.is_tracked(record)
    assert kpd_core.HEADER_FRAMING_BYTES == record_size.HEADER_FRAMING_BYTES


@pytest.mark.parametrize(
    ("key", "value", "hs"),
    [
        ("k", b"v", ()),  # a str key: Kafka gives bytes or None
        (None, b"v", (("h",),)),
        (None, b"v", (("h", "text"),)),
        (None, b"v", ((1, b"x"),)),
        (None, b"v", 5),
    ],
)
def test_a_record_of_other_types_is_refused(key: object, value: object, hs: object) -> None:
    with pytest.raises(TypeError):
        SourceRecord("t", 0, 0, key, value, hs, 0)  # type: ignore[arg-type]


def test_an_original_comes_from_its_own_place_whatever_its_headers_say() -> None:
    record = SourceRecord.of(message("orders", 9, copied(), partition=1))
    assert provenance(record, RETRY) == Provenance(Origin("orders", 1, 9), 0)
    assert Origin.here(record) == Origin("orders", 1, 9)
    assert hash(Origin.here(record)) == hash(Origin("orders", 1, 9))


@given(
    topics, st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1), st.integers(0, 0xFFFE), headers
)
def test_a_copy_kpd_wrote_is_trusted(
    topic: str, partition: int, offset: int, count: int, user: list
) -> None:
    original = SourceRecord(topic, partition, offset, None, b"v", tuple(user), 1)
    hs = copy_headers(original, Origin.here(original), count)
    if len({name for name, _ in hs}) < len(hs):
        return  # the user's own headers repeat a name: not trusted, as the next test shows
    found = provenance(retry(hs), RETRY)
    assert found == Provenance(Origin(topic, partition, offset), count)


@pytest.mark.parametrize(
    ("hs", "reason"),
    [
        ([*copied(), ("h", b"1"), ("h", b"2")], "header h appears twice"),
        (copied()[1:], "retry copy without kpd-delivery-count"),
        ([(ORIGIN_TOPIC, None)], "retry copy without kpd-origin-topic"),
        (copied(topic=b"a/b"), "kpd-origin-topic 'a/b' is not a topic name"),
        (copied(topic=b""), "kpd-origin-topic '' is not a topic name"),
        (copied(topic=b"x" * 250), f"kpd-origin-topic {'x' * 80!r} is not a topic name"),
        (copied(topic=b"o'r\xff"), 'kpd-origin-topic "o\'r\ufffd" is not a topic name'),
        (copied(topic=b"\x00\t\\"), "kpd-origin-topic '\\x00\\t\\\\' is not a topic name"),
        (copied(partition=b"03"), "kpd-origin-partition b'03' is not a decimal in 0..2147483647"),
        (
            copied(partition=b"2147483648"),
            "kpd-origin-partition b'2147483648' is not a decimal in 0..2147483647",
        ),
        (
            copied(offset=b"-1"),
            "kpd-origin-offset b'-1' is not a decimal in 0..9223372036854775807",
        ),
        (
            copied(offset=b"9" * (1 << 20)),
            f"kpd-origin-offset {b'9' * 40!r} is not a decimal in 0..9223372036854775807",
        ),
        (
            [*copied()[1:], (DELIVERY_COUNT, b"00")],
            "kpd-delivery-count b'00' is not a decimal in 0..65534",
        ),
        (
            [*copied()[1:], (DELIVERY_COUNT, b"65535")],
            "kpd-delivery-count b'65535' is not a decimal in 0..65534",
        ),
        (
            [*copied()[1:], (DELIVERY_COUNT, "\u0661".encode())],  # an Arabic-Indic digit one
            "kpd-delivery-count b'\\xd9\\xa1' is not a decimal in 0..65534",
        ),
    ],
)
def test_a_copy_kpd_cannot_trust_says_why(hs: list, reason: str) -> None:
    found = provenance(retry(hs), RETRY)
    assert found == Provenance(Origin(RETRY, 2, 5), 0, reason)


def kafka_error() -> Message:
    return Message(topic="orders", partition=0, error=KafkaError(KafkaError._PARTITION_EOF))


def test_a_consume_runs_by_lane_in_the_order_consumed() -> None:
    spoiled = copied(partition=b"x")
    messages = [
        message("orders", 1),
        message("orders", 2),
        kafka_error(),  # skipped, and the run goes on
        message("orders", 3),
        message("orders", 1, partition=1),
        message(RETRY, 4, copied()),
        message(RETRY, 5, copied()),
        message(RETRY, 6, copied(topic=b"other")),
        message(RETRY, 7, spoiled),
        message(RETRY, 8, copied()),
    ]
    runs = kpd_core.lane_runs(messages, RETRY, UNTRUSTED)
    assert [(o, lane, p, [r.offset for r, _ in run]) for o, lane, p, run in runs] == [
        ("orders", "orders", 0, [1, 2, 3]),
        ("orders", "orders", 1, [1]),
        ("orders", lane_name(RETRY, "orders"), 0, [4, 5]),
        ("other", lane_name(RETRY, "other"), 0, [6]),
        (UNTRUSTED, lane_name(RETRY, UNTRUSTED), 0, [7]),
        ("orders", lane_name(RETRY, "orders"), 0, [8]),
    ]
    assert runs[2][3][0][1] == Provenance(Origin("orders", 3, 7), 2)
    assert runs[4][3][0][1].distrust.startswith("kpd-origin-partition b'x'")


@given(
    st.lists(
        st.tuples(st.sampled_from(["orders", RETRY]), st.integers(0, 2), st.booleans()),
        max_size=30,
    )
)
def test_runs_hold_every_record_once_and_split_only_between_lanes(picks: list) -> None:
    messages = [
        message(topic, offset, copied() if good else copied(topic=b"?"), partition=p)
        for offset, (topic, p, good) in enumerate(picks)
    ]
    runs = kpd_core.lane_runs(messages, RETRY, UNTRUSTED)
    assert [r.offset for *_, run in runs for r, _ in run] == list(range(len(picks)))
    lanes = [(lane, p) for _, lane, p, _ in runs]
    assert all(a != b for a, b in itertools.pairwise(lanes))
    for _, lane, p, run in runs:
        assert {(lane_name(r.topic, f.origin.topic if not f.distrust else ""), r.partition)
                for r, f in run} == {(lane, p)}  # fmt: skip


@pytest.fixture
def fetcher() -> Iterator[GroupFetcher]:
    leased = {("orders", 0): 2}  # offsets up to 2 were leased before a restart
    made = GroupFetcher(
        "g", RETRY, {"bootstrap.servers": "127.0.0.1:1"},
        lambda key: leased.get(key, -1), lambda t, p: True,
    )  # fmt: skip
    yield made
    made.close()


def test_the_fetcher_skips_what_its_ledgers_leased_and_counts_the_rest(
    fetcher: GroupFetcher,
) -> None:
    arrived: set[str] = set()
    fetcher._sort([message("orders", n) for n in range(5)], arrived)
    fetcher._sort([message("orders", 1, partition=1), message(RETRY, 9, copied())], arrived)
    fetcher._sort([message("orders", n) for n in range(2)], arrived)  # all leased already
    assert arrived == {"orders"}
    assert fetcher.available("orders") == 4 and fetcher.available("orders", retries=True) == 1
    assert fetcher.next_offset("orders", 0) == 2  # the consumer's last: the later, leased one
    taken = fetcher.take("orders", 10)
    assert [(key, record.offset) for key, (record, _) in taken] == [
        ((lane_name(RETRY, "orders"), 0), 9),
        (("orders", 0), 3),
        (("orders", 0), 4),
        (("orders", 1), 1),
    ]
