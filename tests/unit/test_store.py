"""The RocksDB store: column families, atomic batches, ordered scans, reopen; one per shard."""

from __future__ import annotations

from pathlib import Path

from foundation.store import ShardStores, Store, shard_stores


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


def test_each_shard_has_a_store_of_its_own_that_survives_reopen(tmp_path: Path) -> None:
    """A shard's state is one folder: what one shard's store holds, another's does not, and a
    process that opens the folders again finds each shard's keys where they were."""
    stores = ShardStores(tmp_path / "shards", ["x"])
    for shard in (0, 3):
        batch = stores.of(shard).batch()
        batch.put("x", b"k", f"shard {shard}".encode())
        stores.of(shard).write(batch)
    assert stores.of(3) is stores.of(3)
    assert stores.of(1).get("x", b"k") is None
    stores.close()
    assert sorted(p.name for p in (tmp_path / "shards").iterdir()) == [
        "shard-0", "shard-1", "shard-3"
    ]  # fmt: skip
    reopened = ShardStores(tmp_path / "shards", ["x"])
    assert [reopened.of(s).get("x", b"k") for s in (0, 1, 3)] == [b"shard 0", None, b"shard 3"]
    reopened.close()


def test_a_write_listener_hears_the_stores_opened_after_it(tmp_path: Path) -> None:
    """The API's index-write wake-up is registered once, before any shard's store is opened."""
    stores = ShardStores(tmp_path / "shards", ["x"])
    heard: list[int] = []
    before = stores.of(0)
    stores.on_write(lambda: heard.append(1))
    for store in (before, stores.of(5)):
        batch = store.batch()
        batch.put("x", b"k", b"v")
        store.write(batch)
    assert len(heard) == 2
    stores.close()


def test_a_folder_of_the_single_store_layout_is_dropped_for_a_rebuild(tmp_path: Path) -> None:
    """The one store every shard shared before (`rocksdb/`) is an index of Kafka: removed, so the
    shards' stores are rebuilt from the topics rather than left beside them, unused."""
    old = Store(tmp_path / "rocksdb", ["x"])
    batch = old.batch()
    batch.put("x", b"k", b"v")
    old.write(batch)
    old.close()
    stores = shard_stores(tmp_path, ["x"])
    assert not (tmp_path / "rocksdb").exists()
    assert stores.of(0).get("x", b"k") is None
    stores.close()
