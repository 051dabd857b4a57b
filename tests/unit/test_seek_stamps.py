"""Seek stamps: the header a retry copy carries, the metadata a committed offset keeps, and a
fetcher dropping the buffered copies a seek ended (`revive.seek_stamps`)."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition
from hypothesis import given
from hypothesis import strategies as st

from foundation.wire import ORIGIN_SEEK
from revive import seek_stamps
from revive.copies import Origin, copy_headers, provenance
from revive.source_record import SourceRecord

RETRY = "kpd.retry.g"


def copy_of(offset: int, stamp: int) -> SourceRecord:
    """A retry copy of `orders` [0] @offset, made under `stamp`."""
    original = SourceRecord("orders", 0, offset, None, b"v", (("user", b"h"),), 1)
    headers = copy_headers(original, Origin("orders", 0, offset), 1, stamp)
    return SourceRecord(RETRY, 0, offset, None, b"v", tuple(headers), 2)


@given(st.integers(1, 10**18 - 1))
def test_a_copy_carries_its_stamp_and_the_metadata_keeps_it(stamp: int) -> None:
    assert seek_stamps.of_record(copy_of(5, stamp)) == stamp
    committed = [seek_stamps.offset("orders", p, 10, stamp) for p in range(3)]
    assert seek_stamps.of_committed(committed) == stamp


def test_before_a_first_seek_nothing_is_written() -> None:
    record = copy_of(5, 0)
    assert ORIGIN_SEEK not in dict(record.headers)
    assert seek_stamps.of_record(record) == 0
    assert seek_stamps.offset("orders", 0, 10, 0).metadata is None
    assert seek_stamps.of_committed([TopicPartition("orders", 0, 10)]) == 0


def test_the_latest_stamp_of_a_topics_partitions_is_the_topics() -> None:
    committed = [seek_stamps.offset("orders", 0, 1, 7), seek_stamps.offset("orders", 1, 1, 9)]
    committed.append(TopicPartition("orders", 2, 1, metadata="a tool's own note"))
    assert seek_stamps.of_committed(committed) == 9


@pytest.mark.parametrize(
    "text", [None, b"", b"-5", b" 5", b"5 ", b"+5", b"0x10", b"1" * 19, "٣".encode(), b"\xff"]
)
def test_a_stamp_that_is_not_plain_digits_is_zero(text: bytes | None) -> None:
    assert seek_stamps.parse(text) == 0


def test_the_stamp_is_bookkeeping_and_the_copy_stays_trusted() -> None:
    record = copy_of(5, 12345)
    found = provenance(record, RETRY)
    assert found.distrust is None
    assert (found.origin.topic, found.origin.offset, found.previous_deliveries) == ("orders", 5, 1)
    # A copy of a copy replaces kpd's headers instead of piling them up.
    again = copy_headers(record, found.origin, 2, 12346)
    assert [value for name, value in again if name == ORIGIN_SEEK] == [b"12346"]
