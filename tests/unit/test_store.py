"""The RocksDB store: column families, atomic batches, byte-ordered scans, reopen."""

from __future__ import annotations

from pathlib import Path

from foundation.store import Store


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
