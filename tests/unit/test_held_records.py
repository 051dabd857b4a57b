"""HeldRecords: what a pop leader keeps of the records it handed out, for copies without reads."""

import gc

from confluent_kafka import Message
from hypothesis import given
from hypothesis import strategies as st

from foundation.record_size import HEADER_FRAMING_BYTES
from revive.copies import copy_headers, provenance
from revive.held_records import ENTRY_OVERHEAD_BYTES, HeldRecord, HeldRecords

KEY = ("workers", "orders", 0)


def message(offset: int, value: bytes = b"v" * 50, topic: str = "orders") -> Message:
    return Message(
        topic=topic, partition=0, offset=offset, key=b"k", value=value,
        headers=[("h", b"x"), ("n", None)], timestamp=(1, 1_700_000_000_000 + offset),
    )  # fmt: skip


def test_a_held_record_reads_like_the_message_it_came_from():
    original = message(7)
    held = HeldRecord.of(original)
    for method in ("topic", "partition", "offset", "key", "value", "timestamp"):
        assert getattr(held, method)() == getattr(original, method)(), method
    assert list(held.headers()) == original.headers()
    assert provenance(held, "retry") == provenance(original, "retry")
    assert copy_headers(held, provenance(held, "retry").origin, 2) == copy_headers(
        original, provenance(original, "retry").origin, 2
    )
    headers = (1 + 1 + HEADER_FRAMING_BYTES) + (1 + 0 + HEADER_FRAMING_BYTES)
    assert held.size == ENTRY_OVERHEAD_BYTES + 1 + 50 + headers
    assert not gc.is_tracked(held)  # a busy shard holds thousands: collections do not walk them


def test_a_retry_copy_held_keeps_its_kpd_headers_trusted():
    headers = [
        ("kpd-delivery-count", b"2"), ("kpd-origin-topic", b"orders"),
        ("kpd-origin-partition", b"0"), ("kpd-origin-offset", b"3"),
    ]  # fmt: skip
    retry = Message(topic="retry", partition=0, offset=1, value=b"v", headers=headers)
    found = provenance(HeldRecord.of(retry), "retry")
    assert (found.origin.offset, found.previous_deliveries) == (3, 2)


def test_kept_until_dropped_and_a_message_without_headers():
    held = HeldRecords(budget_bytes=1 << 20)
    held.keep(KEY, message(1))
    held.keep(KEY, Message(topic="orders", partition=0, offset=2, value=None))
    assert held.get(KEY, 1).value() == b"v" * 50
    assert held.get(KEY, 2).headers() == () and held.get(KEY, 2).value() is None
    assert held.get(("other", "orders", 0), 1) is None  # another group's lease of the record
    held.drop(KEY, 1)
    held.drop(KEY, 1)  # twice changes nothing
    assert held.get(KEY, 1) is None and len(held) == 1
    held.drop(KEY, 2)
    assert held.bytes == 0


def test_the_oldest_make_room_and_what_never_fits_is_not_held():
    one = HeldRecord.of(message(0)).size
    held = HeldRecords(budget_bytes=3 * one)
    for offset in range(5):
        held.keep(KEY, message(offset))
    assert [o for o in range(5) if held.get(KEY, o) is not None] == [2, 3, 4]
    assert held.bytes == 3 * one
    held.keep(KEY, message(9, value=b"v" * (3 * one)))  # bigger than the whole budget
    assert held.get(KEY, 9) is None and len(held) == 3


@given(
    st.lists(st.tuples(st.booleans(), st.integers(0, 6), st.binary(max_size=200)), max_size=60),
    st.integers(0, 2_000),
)
def test_bytes_are_exact_and_within_budget(operations, budget):
    """Model: the records kept (that fit the budget at all) and not dropped, newest last; what is
    held is a newest suffix of them."""
    held = HeldRecords(budget_bytes=budget)
    model: dict[int, bytes] = {}
    for keep, offset, value in operations:
        if keep:
            held.keep(KEY, message(offset, value))
            model.pop(offset, None)
            if HeldRecord.of(message(offset, value)).size <= budget:
                model[offset] = value
        else:
            held.drop(KEY, offset)
            model.pop(offset, None)
        present = [o for o in model if held.get(KEY, o) is not None]
        assert all(held.get(KEY, o).value() == model[o] for o in present)
        assert present == list(model)[len(model) - len(present) :]  # the oldest went first
        assert held.bytes == sum(held.get(KEY, o).size for o in present) <= budget
        assert len(held) == len(present)
