"""HeldRecords: what a pop leader keeps of the records it handed out, for copies without reads."""

import gc

from confluent_kafka import Message
from hypothesis import given
from hypothesis import strategies as st

from foundation.record_size import HEADER_FRAMING_BYTES
from revive.held_records import ENTRY_OVERHEAD_BYTES, HeldRecords, held_bytes
from revive.source_record import SourceRecord

KEY = ("workers", "orders", 0)
OTHER = ("workers", "orders", 1)


def message(offset: int, value: bytes = b"v" * 50, topic: str = "orders") -> SourceRecord:
    return SourceRecord.of(
        Message(
            topic=topic, partition=0, offset=offset, key=b"k", value=value,
            headers=[("h", b"x"), ("n", None)], timestamp=(1, 1_700_000_000_000 + offset),
        )
    )  # fmt: skip


def bare(offset: int) -> SourceRecord:
    return SourceRecord.of(Message(topic="orders", partition=0, offset=offset, value=None))


def test_a_record_is_copied_whole_and_untracked_by_the_garbage_collector():
    record = message(7)
    assert record == SourceRecord(
        "orders", 0, 7, b"k", b"v" * 50, (("h", b"x"), ("n", None)), 1_700_000_000_007
    )
    assert not gc.is_tracked(record)


def test_a_record_costs_its_key_value_headers_and_the_entry():
    headers = (1 + 1 + HEADER_FRAMING_BYTES) + (1 + 0 + HEADER_FRAMING_BYTES)
    assert held_bytes(message(7)) == ENTRY_OVERHEAD_BYTES + 1 + 50 + headers
    assert held_bytes(bare(2)) == ENTRY_OVERHEAD_BYTES


def test_kept_until_dropped_and_a_message_without_headers():
    held = HeldRecords(budget_bytes=1 << 20)
    first = message(1)
    held.keep(KEY, [first, bare(2)])
    assert held.get(KEY, 1) is first  # the fetched record itself: nothing copied
    assert held.get(KEY, 2).headers == () and held.get(KEY, 2).value is None
    assert held.get(("other", "orders", 0), 1) is None  # another group's lease of the record
    held.drop([(KEY, 1)])
    held.drop([(KEY, 1)])  # twice changes nothing
    held.drop([(("never", "held", 0), 1)])
    assert held.get(KEY, 1) is None and len(held) == 1
    held.drop([(KEY, 2)])
    assert held.bytes == 0 and len(held) == 0


def test_the_oldest_make_room_and_what_never_fits_is_not_held():
    one = held_bytes(message(0))
    held = HeldRecords(budget_bytes=3 * one)
    held.keep(KEY, (message(offset) for offset in range(5)))
    assert [o for o in range(5) if held.get(KEY, o) is not None] == [2, 3, 4]
    assert held.bytes == 3 * one
    held.keep(KEY, [message(9, value=b"v" * (3 * one))])  # bigger than the whole budget
    assert held.get(KEY, 9) is None and len(held) == 3


def test_the_ledger_held_longest_gives_up_its_records_first():
    one = held_bytes(message(0))
    held = HeldRecords(budget_bytes=4 * one)
    held.keep(KEY, [message(0), message(1)])
    held.keep(OTHER, [message(0), message(1)])
    held.keep(KEY, [message(2)])  # KEY was held first: its oldest goes, not OTHER's
    assert [held.get(KEY, o) is not None for o in range(3)] == [False, True, True]
    assert [held.get(OTHER, o) is not None for o in range(2)] == [True, True]
    held.drop([(KEY, 1)])
    held.drop([(KEY, 2)])  # KEY is empty: held again, it comes after OTHER
    held.keep(KEY, [message(5), message(6)])
    held.keep(KEY, [message(7)])
    assert [held.get(OTHER, o) is not None for o in range(2)] == [False, True]
    assert held.bytes == 4 * one


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
            held.keep(KEY, [message(offset, value)])
            model.pop(offset, None)
            if held_bytes(message(offset, value)) <= budget:
                model[offset] = value
        else:
            held.drop([(KEY, offset)])
            model.pop(offset, None)
        present = [o for o in model if held.get(KEY, o) is not None]
        assert all(held.get(KEY, o).value == model[o] for o in present)
        assert present == list(model)[len(model) - len(present) :]  # the oldest went first
        assert held.bytes == sum(held_bytes(held.get(KEY, o)) for o in present) <= budget
        assert len(held) == len(present)
