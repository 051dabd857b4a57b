"""PartitionLedger statuses, expiry, watermark, memory; state records and replay."""

import copy
import tracemalloc

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from revive.ledger import Outcome, PartitionLedger
from revive.ledger_replay import apply, replay
from revive.records import (
    AckRecord,
    AnswerRecord,
    CheckpointRecord,
    DeadlineRecord,
    ForgetRecord,
    InvalidStateRecord,
    SeekRecord,
    ack_records,
    decode_record,
)

# What an offset-ordered ledger settles with; RELEASED is a lane by key's (`revive.key_lane`).
LEDGER_OUTCOMES = [outcome for outcome in Outcome if outcome is not Outcome.RELEASED]


def ledger_with(*batches, committed=100, deadline=1_000):
    """A ledger with one checkpoint per batch of offsets; checkpoint ids 1, 2, ..."""
    ledger = PartitionLedger(committed)
    for cid, offsets in enumerate(batches, start=1):
        ledger.open_checkpoint(cid, offsets, [cid] * len(offsets), deadline)
    return ledger


# --- statuses ---------------------------------------------------------------------------------


def test_ack_statuses():
    ledger = ledger_with([100, 101, 102])
    assert ledger.ack(1, 100, now_ms=999) == "acked"
    assert ledger.ack(1, 100, now_ms=999) == "already_acked"
    assert ledger.ack(1, 101, now_ms=1_000) == "acked_late"  # deadline reached, not requeued
    assert ledger.settle(1, 102, Outcome.REQUEUED) == "ok"
    assert ledger.ack(1, 102, now_ms=10) == "superseded"
    assert ledger.settle(1, 102, Outcome.DEAD_LETTERED) == "superseded"
    assert ledger.settle(1, 100, Outcome.REQUEUED) == "already_acked"


def test_ack_status_foretells_an_ack_and_changes_nothing():
    ledger = ledger_with([100, 101, 102])
    assert ledger.settle(1, 102, Outcome.REQUEUED) == "ok"
    asked = [ledger.ack_status(1, o, 1_000) for o in (100, 101, 102, 103)]
    assert asked == ["acked_late", "acked_late", "superseded", "invalid"]
    assert ledger.ack_status(1, 100, 999) == "acked"
    assert ledger.in_flight() == 2
    assert ledger.ack(1, 100, 999) == "acked"
    assert ledger.ack_status(1, 100, 999) == "already_acked"


def test_invalid_receipts():
    ledger = ledger_with([100, 102])
    assert ledger.ack(1, 101, 0) == "invalid"  # gap offset, never leased
    assert ledger.ack(1, 103, 0) == "invalid"
    assert ledger.ack(2, 100, 0) == "invalid"  # unknown checkpoint
    assert ledger.settle(7, 100, Outcome.REQUEUED) == "invalid"
    assert ledger.change_deadline(1, 101, 5_000, 0) == "invalid"
    assert ledger.in_flight() == 2


def test_dead_lettered_is_superseded_for_acks():
    ledger = ledger_with([100, 101])
    assert ledger.settle(1, 100, Outcome.DEAD_LETTERED) == "ok"
    assert ledger.ack(1, 100, 0) == "superseded"
    assert ledger.change_deadline(1, 100, 9_000, 0) == "superseded"


def test_dropped_checkpoint_still_answers_for_late_receipts():
    ledger = ledger_with([100, 101], [102])
    assert ledger.ack(1, 100, 0) == "acked"
    assert ledger.settle(1, 101, Outcome.REQUEUED) == "ok"
    assert ledger.ack(2, 102, 0) == "acked"
    assert ledger.low_watermark(103) == 103  # both checkpoints dropped
    assert ledger.ack(1, 100, 0) == "already_acked"
    assert ledger.ack(1, 101, 5_000) == "superseded"  # retained: it requeued something
    assert ledger.ack(2, 102, 0) == "already_acked"  # forgotten entirely: all acked
    assert ledger.ack(3, 102, 0) == "invalid"  # never issued


def test_retention_of_requeued_checkpoints_is_bounded():
    ledger = PartitionLedger(0, retain_settled=2)
    for cid in range(1, 5):
        ledger.open_checkpoint(cid, [cid], [1], 0)
        ledger.settle(cid, cid, Outcome.REQUEUED)
    assert [ledger.ack(cid, cid, 0) for cid in range(1, 5)] == [
        "already_acked",
        "already_acked",
        "superseded",
        "superseded",
    ]


def test_open_checkpoint_validation():
    ledger = ledger_with([100, 101])
    with pytest.raises(ValueError):
        ledger.open_checkpoint(1, [200], [1], 0)  # id not increasing
    with pytest.raises(ValueError):
        ledger.open_checkpoint(2, [101], [1], 0)  # offset already leased
    with pytest.raises(ValueError):
        ledger.open_checkpoint(2, [300, 300], [1, 1], 0)
    with pytest.raises(ValueError):
        ledger.open_checkpoint(2, [300, 299], [1, 1], 0)
    with pytest.raises(ValueError):
        ledger.open_checkpoint(2, [300], [1, 1], 0)
    with pytest.raises(ValueError):
        ledger.open_checkpoint(2, [300], [0], 0)
    with pytest.raises(ValueError):
        ledger.open_checkpoint(2, [], [], 0)
    with pytest.raises(ValueError):
        PartitionLedger(0).open_checkpoint(1, [5], [70_000], 0)
    with pytest.raises(ValueError):
        ledger_with(committed=100).open_checkpoint(1, [99], [1], 0)  # below committed


def test_delivery_count():
    ledger = PartitionLedger(0)
    ledger.open_checkpoint(5, [0, 3, 9], [1, 4, 16], 0)
    assert [ledger.delivery_count(5, o) for o in (0, 3, 9)] == [1, 4, 16]
    with pytest.raises(KeyError):
        ledger.delivery_count(5, 4)


# --- expiry -----------------------------------------------------------------------------------


def test_expired_reports_each_lease_once_in_deadline_order():
    ledger = PartitionLedger(0)
    ledger.open_checkpoint(1, [0, 1, 2], [1, 2, 3], 2_000)
    ledger.open_checkpoint(2, [3, 4], [1, 1], 1_000)
    ledger.ack(1, 1, 500)
    assert ledger.expired(999) == []
    assert ledger.expired(1_000) == [(2, 3, 1), (2, 4, 1)]
    assert ledger.expired(1_500) == []
    assert ledger.expired(5_000) == [(1, 0, 1), (1, 2, 3)]
    assert ledger.expired(9_000) == []
    assert ledger.in_flight() == 4  # reported but not yet settled by the revive loop
    assert ledger.ack(2, 3, 5_000) == "acked_late"  # an ack racing the revive loop wins
    assert ledger.settle(2, 3, Outcome.REQUEUED) == "already_acked"


def test_extended_and_shortened_deadlines():
    ledger = PartitionLedger(0)
    ledger.open_checkpoint(1, [0, 1, 2], [1, 1, 1], 1_000)
    assert ledger.change_deadline(1, 0, 5_000, now_ms=100) == "ok"
    assert ledger.change_deadline(1, 1, 100, now_ms=100) == "ok"  # visible now
    assert ledger.expired(100) == [(1, 1, 1)]
    assert ledger.expired(1_000) == [(1, 2, 1)]
    assert ledger.ack(1, 0, 4_999) == "acked"  # extension made it on time
    assert ledger.expired(10_000) == []


def test_extension_then_back_to_base_deadline():
    ledger = PartitionLedger(0)
    ledger.open_checkpoint(1, [0, 1], [1, 1], 1_000)
    assert ledger.change_deadline(1, 0, 3_000, 10) == "ok"
    assert ledger.change_deadline(1, 0, 1_000, 20) == "ok"
    assert ledger.expired(1_000) == [(1, 0, 1), (1, 1, 1)]
    assert ledger.expired(3_000) == []


def test_expired_lease_cannot_be_extended():
    ledger = PartitionLedger(0)
    ledger.open_checkpoint(1, [0, 1], [1, 1], 1_000)
    assert ledger.change_deadline(1, 0, 9_000, now_ms=1_000) == "superseded"
    assert ledger.expired(1_000) == [(1, 0, 1), (1, 1, 1)]
    assert ledger.settle(1, 0, Outcome.REQUEUED) == "ok"
    assert ledger.change_deadline(1, 0, 9_000, now_ms=10) == "superseded"
    assert ledger.ack(1, 1, 1_200) == "acked_late"
    assert ledger.change_deadline(1, 1, 9_000, now_ms=10) == "already_acked"


def test_expiry_uses_the_heap_not_a_scan():
    ledger = PartitionLedger(0)
    for cid in range(1, 1_001):
        ledger.open_checkpoint(cid, [cid], [1], 10_000 + cid)
    assert ledger.expired(10_003) == [(1, 1, 1), (2, 2, 1), (3, 3, 1)]
    assert ledger.scans() == 3  # only the due heap entries were looked at


def test_next_deadline_says_when_a_lease_may_end_next():
    ledger = PartitionLedger(0)
    assert ledger.next_deadline_ms() is None
    ledger.open_checkpoint(1, [0, 1], [1, 1], 2_000)
    ledger.open_checkpoint(2, [2], [1], 3_000)
    assert ledger.next_deadline_ms() == 2_000
    assert ledger.change_deadline(2, 2, 500, now_ms=100) == "ok"
    assert ledger.next_deadline_ms() == 500
    assert ledger.expired(500) == [(2, 2, 1)]
    assert ledger.next_deadline_ms() == 2_000
    assert ledger.change_deadline(1, 1, 4_000, now_ms=600) == "ok"
    assert ledger.expired(2_000) == [(1, 0, 1)]
    # Checkpoint 2's first entry (3_000) is passed over: its lease was reported at 500.
    assert ledger.next_deadline_ms() == 4_000
    assert ledger.expired(4_000) == [(1, 1, 1)]
    assert ledger.next_deadline_ms() is None


def test_leases_settled_before_their_deadline_wake_nobody_at_it():
    ledger = PartitionLedger(0)
    ledger.open_checkpoint(1, [0, 1], [1, 1], 2_000)
    ledger.open_checkpoint(2, [2], [1], 3_000)
    assert ledger.change_deadline(2, 2, 5_000, now_ms=100) == "ok"
    assert [ledger.ack(1, offset, 100) for offset in (0, 1)] == ["acked"] * 2
    assert ledger.next_deadline_ms() == 3_000  # checkpoint 2's first entry: a bound
    assert ledger.settle(2, 2, Outcome.REQUEUED) == "ok"
    assert ledger.next_deadline_ms() is None


@given(st.data())
@settings(max_examples=150)
def test_no_lease_ends_before_the_next_deadline(data):
    ledger, now, next_offset = PartitionLedger(0), 0, 0
    for cid in range(1, data.draw(st.integers(1, 15)) + 1):
        now += data.draw(st.integers(0, 400))
        ledger.open_checkpoint(cid, [next_offset, next_offset + 1], [1, 1], now + 1_000)
        for offset in (next_offset, next_offset + 1):
            action = data.draw(st.sampled_from(["none", "ack", "settle", "extend"]))
            if action == "ack":
                ledger.ack(cid, offset, now)
            elif action == "settle":
                ledger.settle(cid, offset, Outcome.REQUEUED)
            elif action == "extend":
                ledger.change_deadline(cid, offset, now + data.draw(st.integers(0, 3_000)), now)
        next_offset += 2
        ledger.expired(now + data.draw(st.integers(0, 1_000)))
        bound = ledger.next_deadline_ms()
        if bound is None:
            assert copy.deepcopy(ledger).expired(10**12) == []
        else:
            assert copy.deepcopy(ledger).expired(bound - 1) == []


# --- low watermark ----------------------------------------------------------------------------


def test_low_watermark_with_gaps_and_out_of_order_acks():
    ledger = ledger_with([100, 101, 103], [106, 107], committed=100)
    assert ledger.low_watermark(108) == 100
    ledger.ack(2, 106, 0)
    ledger.ack(1, 101, 0)
    assert ledger.low_watermark(108) == 100
    ledger.ack(1, 100, 0)
    assert ledger.low_watermark(108) == 103
    ledger.settle(1, 103, Outcome.REQUEUED)
    assert ledger.low_watermark(108) == 107  # 104, 105 were never leased: settled
    ledger.ack(2, 107, 0)
    assert ledger.low_watermark(108) == 108
    assert ledger.low_watermark(500) == 500
    assert ledger.in_flight() == 0
    with pytest.raises(ValueError):
        ledger.low_watermark(107)


@st.composite
def ledger_scripts(draw):
    """Batches of increasing (gapped) offsets, and a shuffled order in which to settle them."""
    offset, batches = draw(st.integers(0, 50)), []
    for _ in range(draw(st.integers(1, 8))):
        offsets = []
        for _ in range(draw(st.integers(1, 12))):
            offset += draw(st.integers(1, 3))
            offsets.append(offset)
        batches.append(offsets)
    leased = [(cid, o) for cid, offs in enumerate(batches, 1) for o in offs]
    order = draw(st.permutations(leased))
    outcomes = draw(st.lists(st.sampled_from(LEDGER_OUTCOMES), min_size=len(order)))
    return batches, list(zip(order, outcomes, strict=False))


@given(ledger_scripts())
@settings(max_examples=300)
def test_low_watermark_is_min_unsettled_offset(script):
    batches, steps = script
    ledger = ledger_with(*batches, committed=0)
    cursor = batches[-1][-1] + 1 + len(batches)
    unsettled = {o for offs in batches for o in offs}
    assert ledger.low_watermark(cursor) == min(unsettled)
    for (cid, offset), outcome in steps:
        if outcome is Outcome.ACKED:
            assert ledger.ack(cid, offset, 0) == "acked"
        else:
            assert ledger.settle(cid, offset, outcome) == "ok"
        unsettled.discard(offset)
        assert ledger.low_watermark(cursor) == min(unsettled, default=cursor)
        assert ledger.in_flight() == len(unsettled)
        assert ledger.ack(cid, offset, 0) == (
            "already_acked" if outcome is Outcome.ACKED else "superseded"
        )
    assert ledger.live_checkpoints() == 0  # settled checkpoints were dropped


# --- memory -----------------------------------------------------------------------------------


def _bytes_per_message(offsets_of_batch):
    """Bytes held per leased message for 100 batches of 1,000 offsets near 10**12: the
    ledger's own, and what Python allocated meanwhile (nothing per message)."""
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        ledger = PartitionLedger(10**12)
        for cid in range(100):
            offsets = offsets_of_batch(10**12 + cid * 4_000)
            ledger.open_checkpoint(cid + 1, offsets, b"\x01" * len(offsets), 10**13)
        for cid in range(100):  # acks flip bits and must not allocate per message either
            for offset in offsets_of_batch(10**12 + cid * 4_000)[1::2]:
                ledger.ack(cid + 1, offset, 0)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert ledger.in_flight() == 50_000
    assert grown / 100_000 < 0.5  # no Python object per message
    return ledger.heap_bytes() / 100_000


def test_contiguous_batches_cost_bits_per_message():
    # A list of these offsets would cost >= 40 bytes each (pointer + int object).
    assert 2 <= _bytes_per_message(lambda first: range(first, first + 1_000)) < 4


def test_gapped_batches_cost_a_few_bytes_per_message():
    assert 8 <= _bytes_per_message(lambda first: range(first, first + 3_000, 3)) < 16


def test_extensions_are_stored_sparsely():
    ledger = PartitionLedger(0)
    ledger.open_checkpoint(1, range(1_000), [1] * 1_000, 1_000)
    before = ledger.heap_bytes()
    assert ledger.change_deadline(1, 7, 5_000, 0) == "ok"
    assert 0 < ledger.heap_bytes() - before < 400  # one entry, not a deadline per message
    assert ledger.ack(1, 7, 4_999) == "acked"  # the extended deadline holds
    assert ledger.ack(1, 8, 1_000) == "acked_late"  # the others keep the checkpoint's


# --- state records and replay -----------------------------------------------------------------

KEY = ("workers", "orders", 3)


def test_record_round_trips():
    records = [
        CheckpointRecord(*KEY, 9, (10, 11, 12), (1, 1, 2), 5_000, 4_000),
        CheckpointRecord(*KEY, 10, (13, 20, 21, 90), (3, 1, 1, 16), 5_000, 4_000),
        CheckpointRecord("grüppe", "kpd.retry.grüppe", 0, 2**40, (2**50,), (1,), 2**45, 2**44),
        AckRecord(*KEY, 9, 11, Outcome.ACKED, 4_500),
        AckRecord(*KEY, 9, 12, Outcome.DEAD_LETTERED, 4_600),
        AckRecord(*KEY, 9, 13, Outcome.RELEASED, 9_600),
        DeadlineRecord(*KEY, 9, 10, 60_000, 4_700),
        SeekRecord(*KEY, 0, 4_800),
        SeekRecord(*KEY, 2**62, 4_900),
        ForgetRecord(*KEY, 5_000),
        AnswerRecord(*KEY, "call-1", "ab" * 16, 5_100, b'{"statuses":["acked"]}'),
    ]
    for record in records:
        data = record.to_bytes()
        assert type(record).from_bytes(data) == record
        assert decode_record(data) == record


@given(
    st.text(max_size=300),
    st.text(max_size=70_000) | st.sampled_from(["orders", "t" * 31, "t" * 32, "t" * 256]),
    st.integers(0, 2**31 - 1),
    st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)), max_size=5),
    st.sampled_from(list(Outcome)),
    st.integers(-(2**63), 2**63 - 1),
)
@settings(max_examples=300)
def test_ack_records_are_the_format_the_reader_reads(group, topic, partition, leases, outcome, at):
    """The compiled encoder writes each ack record as `msgpack.packb` writes its fields, in
    the smallest form of each value (`decode_record` reads them)."""
    encoded = ack_records((group, topic, partition), leases, int(outcome), at)
    assert encoded == [
        msgpack.packb([1, 2, group, topic, partition, cp, offset, int(outcome), at])
        for cp, offset in leases
    ]


def test_ack_records_refuse_an_unknown_outcome():
    with pytest.raises(ValueError, match="unknown outcome 5"):
        ack_records(KEY, [(1, 2)], 5, 0)


def test_contiguous_checkpoint_record_is_compact():
    record = CheckpointRecord(*KEY, 1, tuple(range(10**12, 10**12 + 1_000)), (1,) * 1_000, 1, 0)
    assert len(record.to_bytes()) < 1_100  # ~1 byte per delivery count, none per offset


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc1",
        b"garbage that is not msgpack \xff\xff",
        b"\x93\x01\x02\x03",  # [1, 2, 3]: too short for an ack
        b"\x92\x09\x01",  # version 9
        b"\x92\x01\x63",  # unknown kind 99
        b"\x99\x01\x02\xa1g\xa1t\x00\x01\x02\x05\x05",  # outcome 5
        b"\x99\x01\x02\xa1g\xa1t\x00\x01\xc3\x01\x05",  # offset True
        b"\x99\x01\x02\xa1g\xa1t\x00\x01\x02\xc3\x05",  # outcome True (reads as 1)
        msgpack.packb([1, 3, "g", "t", 0, 1, 2, 60.0, 5]),  # a deadline as a float
        msgpack.packb([1, 3, "g", "t", 0, 1, 2, 60, 5, 6]),  # a deadline with a field too many
        msgpack.packb([1, 1, "g", "t", 0, 1, 10, "3", [1, 1, 1], 5, 4]),  # offsets as a str
        msgpack.packb([1, 1, "g", "t", 0, 1, 10, 3, [1, 1, 1], 5]),  # a field too few
        msgpack.packb([1, 1, "g", "t", 0, 1, 10, 3, [1, True, 1], 5, 4]),  # a count True
        msgpack.packb([1, 1, "g", b"t", 0, 1, 10, 3, [1, 1, 1], 5, 4]),  # a topic as bytes
        msgpack.packb([1, 5, "g", "t", 0, -1, 5]),  # a seek below offset 0
        msgpack.packb([1, 5, "g", "t", 0, True, 5]),  # a seek to offset True
        msgpack.packb([1, 5, "g", "t", 0, 7]),  # a seek without its time
        msgpack.packb([1, 6, "g", "t", 0]),  # a forget without its time
        msgpack.packb([1, 6, "g", "t", 0, 1.5]),  # a forget at a float time
        msgpack.packb([1, 7, "g", "t", 0, "id", "digest", 5, "{}"]),  # an answer as text
        msgpack.packb([1, 7, "g", "t", 0, "id", "digest", 5]),  # an answer without its answer
        "a str",
        None,
    ],
)
def test_garbage_records_raise_invalid_state_record(data):
    with pytest.raises(InvalidStateRecord):
        decode_record(data)
    assert issubclass(InvalidStateRecord, ValueError)


def test_from_bytes_checks_the_kind():
    data = AckRecord(*KEY, 1, 2, Outcome.ACKED, 3).to_bytes()
    with pytest.raises(InvalidStateRecord):
        CheckpointRecord.from_bytes(data)
    with pytest.raises(InvalidStateRecord):
        DeadlineRecord.from_bytes(data)


# --- seek -------------------------------------------------------------------------------------


def test_a_seek_back_ends_every_open_lease_and_leases_from_the_new_offset():
    ledger = ledger_with([100, 101, 102], [103, 104])
    assert ledger.ack(1, 100, 0) == "acked"
    assert ledger.open_leases() == [(1, 101), (1, 102), (2, 103), (2, 104)]
    ledger.seek(50)
    assert (ledger.in_flight(), ledger.open_leases(), ledger.expired(10**9)) == (0, [], [])
    assert [ledger.ack(1, 101, 0), ledger.ack(2, 104, 0)] == ["superseded"] * 2
    assert ledger.settle(2, 103, Outcome.REQUEUED) == "superseded"
    assert ledger.ack(1, 100, 0) == "already_acked"  # acked before the seek
    assert ledger.low_watermark(50) == 50
    ledger.open_checkpoint(3, [50, 51], [1, 1], 1_000)  # below what was leased before
    assert ledger.open_leases() == [(3, 50), (3, 51)]
    assert ledger.ack(3, 50, 0) == "acked"
    with pytest.raises(ValueError, match="already leased"):
        ledger.open_checkpoint(4, [49], [1], 1_000)
    assert ledger.low_watermark(52) == 51


def test_a_seek_forward_skips_what_was_not_leased_and_receipts_stay_superseded():
    ledger = ledger_with([100, 101], committed=100)
    ledger.seek(500)
    with pytest.raises(ValueError):
        ledger.low_watermark(499)
    assert ledger.low_watermark(500) == 500
    ledger.open_checkpoint(2, [500], [1], 1_000)
    assert ledger.ack(1, 101, 0) == "superseded"
    assert ledger.ack(2, 500, 0) == "acked"


def test_receipts_from_before_a_seek_are_superseded_beyond_the_retained_checkpoints():
    ledger = PartitionLedger(10, retain_settled=0)
    ledger.open_checkpoint(1, [10, 11], [1, 1], 1_000)
    ledger.seek(0)
    assert [ledger.ack(1, 10, 0), ledger.ack(1, 11, 0)] == ["superseded"] * 2
    assert ledger.ack(2, 10, 0) == "invalid"  # never issued


def test_a_seek_offset_is_checked():
    with pytest.raises(ValueError, match="offset must be >= 0"):
        PartitionLedger(0).seek(-1)
    with pytest.raises(ValueError, match="out of range"):
        PartitionLedger(0).seek(2**64)


def test_a_forgotten_ledger_is_gone_on_replay_and_a_later_pop_starts_one_afresh():
    records = [
        CheckpointRecord(*KEY, 1, (10, 11), (1, 1), 1_000, 0),
        ForgetRecord(*KEY, 5),
        AckRecord(*KEY, 1, 10, Outcome.ACKED, 6),  # a receipt of the deleted group: nothing
    ]
    assert replay(records) == {}
    later = CheckpointRecord(*KEY, 2, (0,), (1,), 2_000, 7)
    [ledger] = replay([*records, later]).values()
    assert (ledger.in_flight(), ledger.ack(1, 11, 8), ledger.ack(2, 0, 8)) == (
        1,
        "invalid",
        "acked",
    )


class RecordingLedger:
    """Drives a live ledger and logs a state record for every accepted change, as the leader."""

    def __init__(self, committed):
        self.ledger = PartitionLedger(committed)
        self.log = []

    def open(self, cid, offsets, counts, deadline, now):
        self.ledger.open_checkpoint(cid, offsets, counts, deadline)
        self.log.append(CheckpointRecord(*KEY, cid, tuple(offsets), tuple(counts), deadline, now))

    def ack(self, cid, offset, now):
        predicted = self.ledger.ack_status(cid, offset, now)
        status = self.ledger.ack(cid, offset, now)
        assert predicted == status  # asking first changes nothing and foretells the ack
        if status in ("acked", "acked_late"):
            self.log.append(AckRecord(*KEY, cid, offset, Outcome.ACKED, now))

    def settle(self, cid, offset, outcome, now):
        if self.ledger.settle(cid, offset, outcome) == "ok":
            self.log.append(AckRecord(*KEY, cid, offset, outcome, now))

    def extend(self, cid, offset, deadline, now):
        if self.ledger.change_deadline(cid, offset, deadline, now) == "ok":
            self.log.append(DeadlineRecord(*KEY, cid, offset, deadline, now))

    def seek(self, offset, now):
        self.ledger.seek(offset)
        self.log.append(SeekRecord(*KEY, offset, now))


def _observe(ledger, probes, cursor, now):
    """Everything a caller can see, asked of a copy so the ledger itself is left as is."""
    ledger = copy.deepcopy(ledger)
    seen = [ledger.in_flight(), ledger.low_watermark(cursor), ledger.expired(now)]
    for cid, offset in probes:
        try:
            seen.append(ledger.delivery_count(cid, offset))
        except KeyError:
            seen.append(None)
    seen += [ledger.ack_status(cid, offset, now) for cid, offset in probes]
    seen += [ledger.ack(cid, offset, now) for cid, offset in probes]
    return seen


@given(st.data())
@settings(max_examples=150)
def test_replay_rebuilds_an_equivalent_ledger(data):
    live = RecordingLedger(committed=10)
    now, next_offset, highest, cids = 0, 10, 10, []
    actions = ["open", "ack", "settle", "extend", "expire", "seek"]
    for _ in range(data.draw(st.integers(1, 40))):
        now += data.draw(st.integers(0, 400))
        action = data.draw(st.sampled_from(actions))
        if action == "open" or not cids:
            first = next_offset + data.draw(st.integers(0, 2))
            offsets = sorted(data.draw(st.sets(st.integers(first, first + 8), min_size=1)))
            counts = data.draw(st.lists(st.integers(1, 20), min_size=len(offsets)))
            cids.append(len(cids) + 1)
            live.open(cids[-1], offsets, counts[: len(offsets)], now + 1_000, now)
            next_offset = offsets[-1] + 1
            highest = max(highest, next_offset)
            continue
        if action == "seek":  # back or forward, from where pops go on
            next_offset = data.draw(st.integers(10, highest + 5))
            highest = max(highest, next_offset)
            live.seek(next_offset, now)
            continue
        cid = data.draw(st.sampled_from(cids))
        offset = data.draw(st.integers(10, highest))
        if action == "ack":
            live.ack(cid, offset, now)
        elif action == "settle":
            live.settle(cid, offset, data.draw(st.sampled_from(LEDGER_OUTCOMES)), now)
        elif action == "extend":
            live.extend(cid, offset, now + data.draw(st.integers(0, 3_000)), now)
        else:
            for expired_cid, expired_offset, _count in live.ledger.expired(now):
                live.settle(expired_cid, expired_offset, Outcome.REQUEUED, now)

    wire = [record.to_bytes() for record in live.log]
    ledgers = replay(decode_record(b) for b in wire)
    assert set(ledgers) == {KEY}
    probes = [(cid, o) for cid in [*cids, len(cids) + 1] for o in range(9, highest + 1)]
    for later in (now, now + 500, now + 5_000):
        assert _observe(ledgers[KEY], probes, next_offset, later) == _observe(
            live.ledger, probes, next_offset, later
        )


def test_replay_skips_records_of_unknown_ledgers_and_apply_returns_statuses():
    ck = CheckpointRecord(*KEY, 1, (5, 6), (1, 1), 1_000, 0)
    orphan = AckRecord("workers", "other", 0, 1, 5, Outcome.ACKED, 10)
    ledgers = replay([orphan, ck, AckRecord(*KEY, 1, 5, Outcome.ACKED, 10)])
    assert set(ledgers) == {KEY}
    ledger = ledgers[KEY]
    assert ledger.low_watermark(7) == 6
    assert apply(ledger, AckRecord(*KEY, 1, 5, Outcome.ACKED, 20)) == "already_acked"
    assert apply(ledger, DeadlineRecord(*KEY, 1, 6, 9_000, 20)) == "ok"
    assert ledger.expired(8_999) == []
    assert apply(ledger, AckRecord(*KEY, 1, 6, Outcome.REQUEUED, 30)) == "ok"
    assert ledger.low_watermark(7) == 7


def test_batches_keep_records_in_order_and_reject_garbage() -> None:
    from revive.records import pack_batch, unpack_batch

    records = [
        CheckpointRecord(*KEY, 1, (5, 6), (1, 1), 1_000, 0),
        AckRecord(*KEY, 1, 6, Outcome.ACKED, 10),
        AckRecord(*KEY, 1, 5, Outcome.REQUEUED, 20),
    ]
    assert unpack_batch(pack_batch([r.to_bytes() for r in records])) == records
    for garbage in (b"", b"\x93\x01\x04\xc0", records[1].to_bytes(), pack_batch([b"junk"])):
        with pytest.raises(InvalidStateRecord):
            unpack_batch(garbage)


@pytest.mark.parametrize(
    ("checkpoint_id", "offset"), [(-1, 100), (1, -1), (2**64, 100), (1, 2**70)]
)
def test_numbers_no_ledger_holds_answer_invalid(checkpoint_id, offset):
    ledger = ledger_with([100, 101])
    assert ledger.ack(checkpoint_id, offset, 0) == "invalid"
    assert ledger.settle(checkpoint_id, offset, Outcome.REQUEUED) == "invalid"
    assert ledger.change_deadline(checkpoint_id, offset, 5, 0) == "invalid"
    with pytest.raises(KeyError):
        ledger.delivery_count(checkpoint_id, offset)
    assert ledger.in_flight() == 2


@pytest.mark.parametrize(
    "args",
    [
        (1, [2**64], [1], 0),
        (1, [-1], [1], 0),
        (-1, [100], [1], 0),
        (1, [100], [0], 0),
        (1, [100], [2**16], 0),
        (1, [100], [1], 2**63),
    ],
)
def test_a_checkpoint_out_of_range_is_a_value_error(args):
    # A state record's numbers are checked only for their type: replay skips a ValueError.
    with pytest.raises(ValueError):
        PartitionLedger(0).open_checkpoint(*args)
