"""KeyLane: the lease book of a lane ordered by key (docs/fifo.md), against a model of the rules:
one lease per key at a time, each key's messages done in offset order, a released message
coming again in place, and a replay from the state records and the records read again that
answers as the live lane did."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from revive.key_lane import KeyLane

KEYS = [b"a", b"b", b"c", None]
LEASE_MS = 1_000


def lane_of(keys: list[bytes | None]) -> KeyLane:
    lane = KeyLane()
    for offset, key in enumerate(keys):
        lane.offer(offset, key)
    return lane


def pop(lane: KeyLane, checkpoint_id: int, wanted: int, now: int) -> list[int]:
    found = lane.eligible(wanted, now)
    if found:
        offsets, counts = map(list, zip(*found, strict=True))
        lane.open_checkpoint(checkpoint_id, offsets, counts, now + LEASE_MS)
    return [offset for offset, _ in found]


def test_one_lease_per_key_and_keyless_records_flow() -> None:
    lane = lane_of([b"a", b"a", b"b", None, b"a", None])
    assert pop(lane, 1, 10, 0) == [0, 2, 3, 5]  # a's next two wait for offset 0
    assert pop(lane, 2, 10, 0) == []
    assert lane.ack(1, 0, 10) == "acked"
    assert pop(lane, 3, 10, 10) == [1]
    assert lane.ack(1, 0, 10) == "already_acked"
    assert lane.low_watermark(6) == 1
    assert lane.ack(1, 2, 10) == "acked"
    assert lane.ack(1, 3, 10) == "acked"
    assert lane.low_watermark(6) == 1  # 1 is leased, 4 waits for it, 5 is leased
    assert lane.blocked_keys() == 1


def test_a_released_head_comes_again_in_place_and_keeps_its_key_blocked() -> None:
    lane = lane_of([b"a", b"a"])
    assert pop(lane, 1, 10, 0) == [0]
    assert lane.release(1, 0, available_at_ms=500) == "ok"
    assert lane.ack(1, 0, 10) == "superseded"
    assert lane.eligible(10, 499) == []  # its backoff holds the key
    assert lane.eligible(10, 500) == [(0, 2)]  # the same message, its second delivery
    assert pop(lane, 2, 10, 500) == [0]
    assert lane.dead_letter(2, 0) == "ok"  # dead-lettered: the key goes on
    assert pop(lane, 3, 10, 500) == [1]
    assert lane.ack(2, 0, 600) == "already_acked"  # done and out of the window, as a ledger's
    assert lane.ack(3, 1, 600) == "acked"
    assert lane.ack(3, 1, 600) == "already_acked"
    assert lane.ack(4, 1, 600) == "invalid"  # a checkpoint never issued


def test_expiry_reports_each_lease_once_and_a_reported_lease_cannot_be_extended() -> None:
    lane = lane_of([b"a", b"b"])
    assert pop(lane, 1, 10, 0) == [0, 1]
    assert lane.change_deadline(1, 1, 5_000, 10) == "ok"
    assert lane.expired(LEASE_MS) == [(1, 0, 1)]
    assert lane.expired(LEASE_MS) == []
    assert lane.change_deadline(1, 0, 9_000, 10) == "superseded"
    assert lane.ack(1, 1, 4_999) == "acked"
    assert lane.ack(1, 0, LEASE_MS) == "acked_late"  # not released yet: the ack wins


def test_nothing_is_leased_past_a_replayed_offset_not_read_again() -> None:
    lane = KeyLane()
    lane.open_checkpoint(7, [3], [1], LEASE_MS)  # replayed: offset 3 of a key not known yet
    lane.offer(1, b"b")
    lane.offer(2, None)
    assert lane.eligible(10, 0) == [(1, 1), (2, 1)]  # not 3's key yet, whatever it is
    lane.offer(3, b"a")
    lane.offer(4, b"a")
    lane.offer(5, b"c")
    assert lane.eligible(10, 0) == [(1, 1), (2, 1), (5, 1)]  # 4 waits for 3, leased
    with pytest.raises(ValueError):
        lane.open_checkpoint(8, [3], [2], LEASE_MS)  # not available
    with pytest.raises(ValueError):
        lane.open_checkpoint(7, [2], [1], LEASE_MS)  # an id not above the last


def test_offsets_below_the_first_read_are_done() -> None:
    lane = KeyLane()
    lane.open_checkpoint(1, [2], [1], LEASE_MS)
    assert lane.ack(1, 2, 0) == "acked"
    lane.offer(5, b"a")  # the group committed 5: what came before is done
    assert lane.low_watermark(6) == 5
    assert lane.ack(1, 2, 0) == "already_acked"


class Run:
    """Drives a lane as the leader would and logs what its state records would hold."""

    def __init__(self, keys: list[bytes | None]) -> None:
        self.keys, self.lane, self.log = keys, KeyLane(), []
        self.read = self.now = 0
        self.next_id = 1
        self.open: dict[tuple[int, int], bytes | None] = {}  # (checkpoint, offset) -> key
        self.done: dict[bytes, list[int]] = {}
        self.issued: list[tuple[int, int]] = []
        self.finished: set[int] = set()  # acked or dead-lettered
        self.back_at: dict[int, int] = {}  # released: when it may be leased again
        self.deliveries: dict[int, int] = {}
        self.committed = 0

    def apply(self, lane: KeyLane, record: tuple[Any, ...]) -> str:
        kind, *args = record
        if kind == "checkpoint":
            lane.open_checkpoint(*args)
            return "ok"
        return str(getattr(lane, kind)(*args))

    def do(self, record: tuple[Any, ...]) -> str:
        status = self.apply(self.lane, record)
        if status in ("ok", "acked", "acked_late"):
            self.log.append(record)
        return status

    def eligible(self, now: int) -> list[tuple[int, int]]:
        """What a pop may take, worked out from the model: each key's first message not done,
        when read, not leased and its time has come; every such keyless one."""
        leased = {offset for _, offset in self.open}
        found, seen = [], set()
        for offset in range(self.read):
            key = self.keys[offset]
            if offset in self.finished or (key is not None and key in seen):
                continue
            if key is not None:
                seen.add(key)
            if offset not in leased and self.back_at.get(offset, 0) <= now:
                found.append((offset, self.deliveries.get(offset, 0) + 1))
        return found

    def settled(self, lease: tuple[int, int], done: bool, back_at: int = 0) -> None:
        key = self.open.pop(lease)
        if done:
            self.finished.add(lease[1])
        else:
            self.back_at[lease[1]] = back_at
        if done and key is not None:
            self.done.setdefault(key, []).append(lease[1])

    def check(self) -> None:
        keys = [key for key in self.open.values() if key is not None]
        assert len(keys) == len(set(keys)), "two leases of one key"
        for now in (self.now, self.now + 10 * LEASE_MS):
            assert self.lane.eligible(100, now) == self.eligible(now)
        assert all(offsets == sorted(offsets) for offsets in self.done.values())
        assert self.lane.in_flight() == len(self.open)


@given(st.data())
@settings(max_examples=200)
def test_the_model_holds_and_a_replay_answers_as_the_live_lane(data: st.DataObject) -> None:
    run = Run(data.draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=25)))
    for _ in range(data.draw(st.integers(1, 80))):
        action = data.draw(
            st.sampled_from(["read", "pop", "ack", "nack", "dead", "extend", "expire", "commit"])
        )
        if action == "read" and run.read < len(run.keys):
            run.lane.offer(run.read, run.keys[run.read])
            run.read += 1
        elif action == "pop":
            found = run.lane.eligible(data.draw(st.integers(1, 4)), run.now)
            for offset, _ in found:  # what may be leased now: never a key's later message
                key = run.keys[offset]
                assert key is None or key not in run.done or offset > run.done[key][-1]
            if found:
                offsets, counts = map(list, zip(*found, strict=True))
                record = ("checkpoint", run.next_id, offsets, counts, run.now + LEASE_MS)
                assert run.do(record) == "ok"
                for offset, count in zip(offsets, counts, strict=True):
                    run.open[(run.next_id, offset)] = run.keys[offset]
                    run.issued.append((run.next_id, offset))
                    run.deliveries[offset] = count
                run.next_id += 1
        elif action in ("ack", "nack", "dead", "extend") and run.open:
            lease = data.draw(st.sampled_from(sorted(run.open)))
            if action == "ack":
                assert run.do(("ack", *lease, run.now)) in ("acked", "acked_late")
                run.settled(lease, done=True)
            elif action == "nack":
                delay = data.draw(st.integers(0, 3)) * 100
                assert run.do(("release", *lease, run.now + delay)) == "ok"
                run.settled(lease, done=False, back_at=run.now + delay)
            elif action == "dead":
                assert run.do(("dead_letter", *lease)) == "ok"
                run.settled(lease, done=True)
            else:
                until = run.now + data.draw(st.integers(1, 3)) * LEASE_MS
                run.do(("change_deadline", *lease, until, run.now))
        elif action == "expire":
            run.now += data.draw(st.integers(0, 2)) * 600
            for checkpoint_id, offset, _ in run.lane.expired(run.now):
                assert run.do(("release", checkpoint_id, offset, run.now)) == "ok"
                run.settled((checkpoint_id, offset), done=False, back_at=run.now)
        elif action == "commit":
            run.committed = run.lane.low_watermark(run.read)
        run.check()
    # A new leader: the state records, then the records read again from the committed offset.
    replayed = KeyLane()
    for record in run.log:
        run.apply(replayed, record)
    replayed.read_from(run.committed)
    for offset in range(run.committed, run.read):
        replayed.offer(offset, run.keys[offset])
    assert replayed.low_watermark(run.read) == run.lane.low_watermark(run.read)
    assert replayed.in_flight() == run.lane.in_flight()
    assert replayed.eligible(100, run.now) == run.lane.eligible(100, run.now)
    assert seen(replayed, run) == seen(run.lane, run)


def seen(lane: KeyLane, run: Run) -> list[Any]:
    """What every receipt issued would answer, and what would expire, asked of copies."""
    asked = copy.deepcopy(lane)
    later = copy.deepcopy(lane).expired(run.now + 10 * LEASE_MS)
    return [*(asked.ack(*lease, run.now) for lease in run.issued), later]


def test_a_seek_ends_every_lease_and_reads_again_from_its_offset() -> None:
    lane = lane_of([b"a", b"a", b"b"])
    assert pop(lane, 1, 10, 0) == [0, 2]
    assert lane.ack_status(1, 0, 0) == "acked" and lane.in_flight() == 2  # asking changes nothing
    lane.seek(1)
    assert lane.ack(1, 0, 0) == "superseded" and lane.in_flight() == 0
    assert lane.eligible(10, 0) == []  # nothing read since
    lane.offer(1, b"a")
    lane.offer(2, b"b")
    assert pop(lane, 2, 10, 0) == [1, 2]
    assert lane.ack(1, 2, 0) == "superseded"
    assert lane.ack(2, 2, 0) == "acked"


def test_when_the_next_lease_ends_and_the_next_release_comes_back() -> None:
    lane = lane_of([b"a", b"b"])
    assert lane.next_deadline_ms() is None
    assert pop(lane, 1, 10, 0) == [0, 1]
    assert lane.next_deadline_ms() == LEASE_MS
    assert lane.release(1, 0, available_at_ms=700) == "ok"
    assert lane.next_available_ms(0) == 700
    assert lane.next_available_ms(700) is None  # available now
    assert lane.expired(LEASE_MS) == [(1, 1, 1)]
    assert lane.next_deadline_ms() is None  # reported: the revive loop has it
