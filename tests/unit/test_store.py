"""The RocksDB store: column families, atomic batches, ordered scans, reopen; one per shard."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from foundation.store import NotHeld, ShardStores, Store, StoreBusy, shard_stores


def test_families_are_separate_key_spaces(tmp_path: Path) -> None:
    store = Store(tmp_path / "db", ["a", "b"])
    batch = store.batch()
    batch.put("a", b"k", b"in-a")
    batch.put("b", b"k", b"in-b")
    store.write(batch)
    assert store.get("a", b"k") == b"in-a"
    assert store.get("b", b"k") == b"in-b"
    assert store.get("a", b"missing") is None


def test_scan_is_byte_ordered_and_bounded(tmp_path: Path) -> None:
    store = Store(tmp_path / "db", ["due"])
    batch = store.batch()
    for due in (30, 5, 1_000_000, 7):
        batch.put("due", due.to_bytes(8, "big") + b"id", b"")
    store.write(batch)
    keys = [int.from_bytes(k[:8], "big") for k, _ in store.scan("due")]
    assert keys == [5, 7, 30, 1_000_000]
    bounded = [
        int.from_bytes(k[:8], "big")
        for k, _ in store.scan("due", (6).to_bytes(8, "big"), (31).to_bytes(8, "big"))
    ]
    assert bounded == [7, 30]


def test_batch_is_all_or_nothing_and_survives_reopen(tmp_path: Path) -> None:
    store = Store(tmp_path / "db", ["x"])
    unwritten = store.batch()
    unwritten.put("x", b"never", b"1")  # built but not written: nothing lands
    batch = store.batch()
    batch.put("x", b"one", b"1")
    batch.put("x", b"two", b"2")
    batch.delete("x", b"one")
    store.write(batch)
    store.close()
    reopened = Store(tmp_path / "db", ["x"])
    assert reopened.get("x", b"never") is None
    assert reopened.get("x", b"one") is None
    assert reopened.get("x", b"two") == b"2"
    reopened.clear(["x"])
    assert list(reopened.scan("x")) == []


def put(store: Store, key: bytes, value: bytes) -> None:
    batch = store.batch()
    batch.put("x", key, value)
    store.write(batch)


def test_each_shard_has_a_store_of_its_own_that_survives_reopen(tmp_path: Path) -> None:
    """A shard's state is one folder: what one shard's store holds, another's does not, and a
    process that opens the folders again finds each shard's keys where they were."""
    stores = ShardStores(tmp_path / "shards", ["x"])
    for shard in (0, 1, 3):
        stores.acquire(shard)
    for shard in (0, 3):
        put(stores.of(shard), b"k", f"shard {shard}".encode())
    assert stores.of(3) is stores.of(3)
    assert stores.of(1).get("x", b"k") is None
    with pytest.raises(NotHeld):
        stores.of(2)
    stores.close()
    assert sorted(p.name for p in (tmp_path / "shards").iterdir()) == [
        "claims", "shard-0", "shard-1", "shard-3"
    ]  # fmt: skip
    reopened = ShardStores(tmp_path / "shards", ["x"])
    assert [reopened.acquire(s).get("x", b"k") for s in (0, 1, 3)] == [b"shard 0", None, b"shard 3"]
    reopened.close()


def test_a_write_listener_hears_the_stores_opened_after_it(tmp_path: Path) -> None:
    """The API's index-write wake-up is registered once, before any shard's store is opened;
    a format check runs on each store as it opens, before its holder sees it."""
    stores = ShardStores(tmp_path / "shards", ["x"])
    heard: list[int] = []
    before = stores.acquire(0)
    stores.on_write(lambda: heard.append(1))
    stores.on_open(lambda shard, store: put(store, b"checked", str(shard).encode()))
    after = stores.acquire(5)
    assert after.get("x", b"checked") == b"5"  # heard too
    assert before.get("x", b"checked") is None  # opened before the check was registered
    put(before, b"k", b"v")
    assert len(heard) == 2
    stores.close()


def test_a_worker_of_the_sidecar_holding_a_store_keeps_the_others_out_until_its_last_hold_ends(
    tmp_path: Path,
) -> None:
    """Two workers over one folder (two `ShardStores`): one holds a shard's store, the other
    is refused it (`StoreBusy`) until the holder's last hold (a role, an API read) lets go."""
    one, other = ShardStores(tmp_path, ["x"]), ShardStores(tmp_path, ["x"])
    store = one.acquire(2)
    assert one.acquire(2) is store  # a second hold in the same worker: the same store
    with pytest.raises(StoreBusy):
        other.acquire(2)
    other.acquire(1)  # another shard's store is free
    one.release(2)
    with one.borrowed(2) as read:  # an API read of the store still held by a role
        one.release(2)
        put(read, b"k", b"written while borrowed")
        with pytest.raises(StoreBusy):
            other.acquire(2)
    assert other.acquire(2).get("x", b"k") == b"written while borrowed"
    with pytest.raises(NotHeld), one.borrowed(2):
        pass
    other.close()
    one.close()


HOLDER = """
import sys, time
sys.path.insert(0, sys.argv[1])
from foundation.store import ShardStores
stores = ShardStores(__import__("pathlib").Path(sys.argv[2]), ["x"])
batch = stores.acquire(0).batch()
batch.put("x", b"k", b"from the holder")
stores.of(0).write(batch)
print("held", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("stop", ["SIGKILL", "SIGSTOP"])
def test_a_store_held_by_a_process_that_died_is_free_at_once_and_one_stopped_keeps_it(
    tmp_path: Path, stop: str
) -> None:
    """RocksDB's LOCK is the process's: a worker killed holding a shard's store leaves it free,
    with what it wrote (the sibling taking the shard over reads on from there); one stopped
    holds it until it goes on, so its sibling rebuilds the shard in a store of its own, which
    starts empty and is dropped when let go, and the folder of a dead process's own store is
    dropped when a worker starts."""
    root = Path(__file__).resolve().parents[2]
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(root), str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        stores = ShardStores(tmp_path, ["x"])
        with pytest.raises(StoreBusy):
            stores.acquire(0)
        os.kill(holder.pid, getattr(signal, stop))
        if stop == "SIGKILL":
            holder.wait(10)
            assert stores.acquire(0).get("x", b"k") == b"from the holder"
        else:
            with pytest.raises(StoreBusy):
                stores.acquire(0)
            private = stores.acquire_private(0)
            assert private.path == tmp_path / f"shard-0.{os.getpid()}"
            assert private.get("x", b"k") is None
            stores.release(0)
            assert not private.path.exists()
        stores.close()
    finally:
        holder.kill()
        holder.wait(10)
    dead = tmp_path / f"shard-1.{holder.pid}"
    alive = tmp_path / f"shard-1.{os.getpid()}"
    Store(dead, ["x"]).close()
    Store(alive, ["x"]).close()
    ShardStores(tmp_path, ["x"]).close()
    assert (dead.exists(), alive.exists()) == (False, True)


def test_a_workers_stores_of_the_layouts_before_are_dropped_for_a_rebuild(tmp_path: Path) -> None:
    """The one store every shard shared (`rocksdb/`), and a worker's own shard stores (`shards/`
    in its folder, before the workers of a sidecar shared theirs), are indexes of Kafka:
    removed, so the shards' stores are rebuilt from the topics rather than left beside them,
    unused. The shared folder of a one-worker sidecar is its own `shards/`: kept."""
    for old in ("w0/rocksdb", "w0/shards/shard-0"):
        store = Store(tmp_path / old, ["x"])
        put(store, b"k", b"v")
        store.close()
    stores = shard_stores(tmp_path / "w0", tmp_path / "shards", ["x"])
    assert not (tmp_path / "w0" / "rocksdb").exists()
    assert not (tmp_path / "w0" / "shards").exists()
    assert stores.acquire(0).get("x", b"k") is None
    put(stores.of(0), b"k", b"v")
    stores.close()
    stores = shard_stores(tmp_path, tmp_path / "shards", ["x"])
    assert stores.acquire(0).get("x", b"k") == b"v"
    stores.close()
