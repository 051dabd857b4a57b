"""How a delay role takes its shard's store from another worker of its sidecar (real RocksDB;
two `ShardStores` over one folder stand for the two workers)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from delay_service import metrics
from delay_service.shard_store import REFENCE_S, give_back_store, take_store
from foundation.store import ShardStores
from foundation.supervision import StopRequested

WAITS_S = (0.4, 0.4)  # unfenced, then fenced


def claim_of(folder: Path, shard: int) -> Path:
    """The claim a role of this process makes (`foundation.store_claims`)."""
    return folder / "claims" / f"{shard}.{os.getpid()}"


def put(stores: ShardStores, shard: int, value: bytes) -> None:
    batch = stores.of(shard).batch()
    batch.put("x", b"k", value)
    stores.of(shard).write(batch)


def test_a_free_store_is_taken_at_once_as_its_last_holder_left_it(tmp_path: Path) -> None:
    old, new = ShardStores(tmp_path, ["x"]), ShardStores(tmp_path, ["x"])
    old.acquire(1)
    put(old, 1, b"written before")
    old.release(1)
    fences: list[float] = []
    started = time.monotonic()
    assert take_store(new, 1, lambda: fences.append(1), lambda: None, WAITS_S) is False
    assert time.monotonic() - started < 0.2 and fences == []
    assert new.of(1).get("x", b"k") == b"written before"
    new.close()


def test_a_standby_letting_go_on_its_own_is_waited_for_without_a_fence(tmp_path: Path) -> None:
    """A sibling's standby drops the shard once it sees the move: the shard's old owner,
    delivering meanwhile, is not fenced before the new role has its store."""
    standby, new = ShardStores(tmp_path, ["x"]), ShardStores(tmp_path, ["x"])
    standby.acquire(2)
    put(standby, 2, b"kept by the standby")
    claimed: list[bool] = []

    def let_go() -> None:  # as the standby's worker does once it sees the claim
        claimed.append(claim_of(tmp_path, 2).exists())
        standby.release(2)

    threading.Timer(0.2, let_go).start()
    fences: list[float] = []
    assert take_store(new, 2, lambda: fences.append(1), lambda: None, WAITS_S) is False
    assert fences == [] and claimed == [True]
    assert new.of(2).get("x", b"k") == b"kept by the standby"
    assert claim_of(tmp_path, 2).exists()  # the role holds it: dropped when it lets go
    new.close()


def test_a_role_given_away_while_it_waits_drops_its_claim(tmp_path: Path) -> None:
    """The shard moved on while the role waited for the store: the sibling's standby may keep
    it again."""
    standby, new = ShardStores(tmp_path, ["x"]), ShardStores(tmp_path, ["x"])
    standby.acquire(4)
    beats: list[bool] = []

    def beat() -> None:
        beats.append(claim_of(tmp_path, 4).exists())
        if len(beats) == 3:
            raise StopRequested("delay-4")

    with pytest.raises(StopRequested):
        take_store(new, 4, lambda: None, beat, WAITS_S)
    assert beats == [True] * 3
    assert not claim_of(tmp_path, 4).exists()
    standby.close()


@pytest.mark.parametrize("claimed", [True, False], ids=["claimed", "unclaimed"])
def test_a_handing_over_role_is_fenced_and_then_its_store_taken(
    tmp_path: Path, claimed: bool
) -> None:
    """A sibling's delay role handing the shard over delivers until fenced, and lets its store
    go only then. It claims the shard (here as a process of its own), so it is fenced at once;
    a holder with no claim is first given the unfenced wait."""
    old, new = ShardStores(tmp_path, ["x"]), ShardStores(tmp_path, ["x"])
    old.acquire(0)
    put(old, 0, b"delivered until fenced")
    sibling = subprocess.Popen(["sleep", "60"])
    if claimed:
        (tmp_path / "claims" / f"0.{sibling.pid}").touch()
    fenced: list[float] = []

    def fence() -> None:
        fenced.append(time.monotonic())
        threading.Timer(0.1, old.release, (0,)).start()  # the fenced role ends, and closes

    rebuilt = metrics.STORES_REBUILT._value.get()
    started = time.monotonic()
    try:
        assert take_store(new, 0, fence, lambda: None, (1.0, 1.0)) is True
    finally:
        sibling.kill()
        sibling.wait()
    assert (fenced[0] - started < 0.5) is claimed
    assert new.of(0).get("x", b"k") == b"delivered until fenced"
    assert metrics.STORES_REBUILT._value.get() == rebuilt
    new.close()
    old.close()


def test_a_sibling_that_fences_after_this_role_is_fenced_again(tmp_path: Path) -> None:
    """A sibling's role still starting when this one fences it fences the shard itself, after
    this role, and then hands over: it lets go only at this role's next fence, within
    `REFENCE_S`, and no store is rebuilt."""
    old, new = ShardStores(tmp_path, ["x"]), ShardStores(tmp_path, ["x"])
    old.acquire(0)
    put(old, 0, b"fenced twice")
    sibling = subprocess.Popen(["sleep", "60"])
    (tmp_path / "claims" / f"0.{sibling.pid}").touch()
    fenced: list[float] = []

    def fence() -> None:  # the first fence is undone by the sibling's own
        fenced.append(time.monotonic())
        if len(fenced) == 2:
            threading.Timer(0.1, old.release, (0,)).start()

    rebuilt = metrics.STORES_REBUILT._value.get()
    try:
        assert take_store(new, 0, fence, lambda: None, (0.4, REFENCE_S + 2)) is True
    finally:
        sibling.kill()
        sibling.wait()
    assert len(fenced) == 2 and REFENCE_S <= fenced[1] - fenced[0] < REFENCE_S + 0.5
    assert new.of(0).get("x", b"k") == b"fenced twice"
    assert metrics.STORES_REBUILT._value.get() == rebuilt
    new.close()
    old.close()


def test_a_holder_that_never_lets_go_leaves_a_rebuild_in_a_store_of_its_own(tmp_path: Path) -> None:
    """A paused sibling's standby keeps its lock through the fence: after both waits the role
    rebuilds the shard in a private store, which starts empty; beats go on all the while. It
    claims nothing, so one fence is all (a standby writes nothing to fence again)."""
    paused, new = ShardStores(tmp_path, ["x"]), ShardStores(tmp_path, ["x"])
    paused.acquire(3)
    put(paused, 3, b"locked away")
    fences: list[float] = []
    beats: list[float] = []
    rebuilt = metrics.STORES_REBUILT._value.get()
    started = time.monotonic()
    waits_s = (WAITS_S[0], REFENCE_S + 0.5)
    assert take_store(new, 3, lambda: fences.append(time.monotonic()), lambda: beats.append(1),
                      waits_s) is True  # fmt: skip
    assert fences[0] - started >= waits_s[0] and time.monotonic() - fences[0] >= waits_s[1]
    assert len(fences) == 1 and len(beats) >= 10
    assert new.of(3).path.name.startswith("shard-3.") and new.of(3).get("x", b"k") is None
    assert metrics.STORES_REBUILT._value.get() == rebuilt + 1
    new.close()
    paused.close()


def test_a_store_given_back_is_free_for_a_sibling_and_unclaimed(tmp_path: Path) -> None:
    role, standby = ShardStores(tmp_path, ["x"]), ShardStores(tmp_path, ["x"])
    assert take_store(role, 1, lambda: None, lambda: None, WAITS_S) is False
    put(role, 1, b"written by the role")
    assert claim_of(tmp_path, 1).exists()
    give_back_store(role, 1)
    assert not claim_of(tmp_path, 1).exists()
    assert standby.acquire(1).get("x", b"k") == b"written by the role"
    standby.close()
    role.close()
