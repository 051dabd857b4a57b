"""The local RocksDB index (DESIGN principle 1: Kafka is the truth, this is a rebuildable cache).

Raw byte keys and values only; each owner of state (schedules, leases, offsets) gets its own column
family so its key space can be range-scanned and its layout changed independently. Changes that
belong together go into one `WriteBatch`, so a crash never leaves half of them on disk. Each
shard's state is a store of its own (`ShardStores`).
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import rocksdict

# Memtables are RocksDB's main memory cost: 64 MB x 2 per column family by default, with no cap
# across families (measured: RSS grew to 430 MB at 5M schedules). Small memtables and one shared
# budget keep memory flat as the backlog grows; bigger ones would only batch flushes more. The
# budget and the block cache are the process's, shared by every store it opens (one per shard),
# so memory does not grow with the shards a worker holds: left to itself each column family of
# each store would make a block cache of 32 MB of its own.
WRITE_BUFFER_BYTES = 8 * 1024 * 1024
TOTAL_WRITE_BUFFER_BYTES = 32 * 1024 * 1024
BLOCK_CACHE_BYTES = 32 * 1024 * 1024
_WRITE_BUFFERS = rocksdict.WriteBufferManager(TOTAL_WRITE_BUFFER_BYTES, False)
_BLOCK_CACHE = rocksdict.Cache(BLOCK_CACHE_BYTES)


def _family_options() -> rocksdict.Options:
    options = rocksdict.Options(raw_mode=True)
    options.set_write_buffer_size(WRITE_BUFFER_BYTES)
    options.set_max_write_buffer_number(2)
    table = rocksdict.BlockBasedOptions()
    table.set_block_cache(_BLOCK_CACHE)
    options.set_block_based_table_factory(table)
    return options


def _options() -> rocksdict.Options:
    options = _family_options()
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    options.set_write_buffer_manager(_WRITE_BUFFERS)
    return options


class Store:
    """One RocksDB database with named column families, opened for the life of the process."""

    def __init__(self, path: Path, column_families: Sequence[str]) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = rocksdict.Rdict(
            str(path),
            options=_options(),
            column_families={name: _family_options() for name in column_families},
        )
        self._families = {name: self._db.get_column_family(name) for name in column_families}
        self._handles = {name: self._db.get_column_family_handle(name) for name in column_families}
        self._on_write: list[Callable[[], None]] = []

    def on_write(self, listener: Callable[[], None]) -> None:
        """Call `listener` after every write (on the writing thread): it must be quick."""
        self._on_write.append(listener)

    def get(self, family: str, key: bytes) -> bytes | None:
        value = self._families[family].get(key)
        return None if value is None else bytes(value)

    def get_many(self, family: str, keys: list[bytes]) -> list[bytes | None]:
        """Values of `keys` in one multi-get, None where a key is absent."""
        values = self._families[family].get(keys)
        return [None if value is None else bytes(value) for value in values]

    def scan(
        self, family: str, start: bytes = b"", stop: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        """Keys in [start, stop) in byte order."""
        for key, value in self._families[family].items(from_key=start):
            if stop is not None and key >= stop:
                return
            yield key, value

    def batch(self) -> Batch:
        return Batch(self)

    def write(self, batch: Batch) -> None:
        if not batch.empty:
            self._db.write(batch.raw)
            for listener in self._on_write:
                listener()

    def clear(self, families: Iterable[str]) -> None:
        """Drop every key of the given families (used when the index is rebuilt from Kafka)."""
        for family in families:
            keys = list(self._families[family].keys())
            batch = self.batch()
            for key in keys:
                batch.delete(family, key)
            self.write(batch)

    def clear_prefix(self, family: str, prefix: bytes) -> None:
        """Drop the keys of `family` that start with `prefix`."""
        batch = self.batch()
        for key, _ in self.scan(family, prefix):
            if not key.startswith(prefix):
                break
            batch.delete(family, key)
        self.write(batch)

    def close(self) -> None:
        # Column-family views keep the database open (and its LOCK held) until dropped.
        self._families.clear()
        self._handles.clear()
        self._db.close()


class Batch:
    """Puts and deletes across column families, applied atomically by `Store.write`."""

    def __init__(self, store: Store) -> None:
        self._handles = store._handles
        self.raw = rocksdict.WriteBatch(raw_mode=True)

    @property
    def empty(self) -> bool:
        return bool(self.raw.is_empty())

    def put(self, family: str, key: bytes, value: bytes) -> None:
        self.raw.put(key, value, self._handles[family])

    def delete(self, family: str, key: bytes) -> None:
        self.raw.delete(key, self._handles[family])


class ShardStores:
    """One `Store` per shard, each in a folder of its own under `folder`, opened on first use.

    A shard's state then moves as one folder: it can be dropped or rebuilt alone, and opened by
    whichever process holds the shard (Kafka Streams keeps one state folder per task the same
    way). They share the process's memtable budget and block cache (above)."""

    def __init__(self, folder: Path, column_families: Sequence[str]) -> None:
        self.folder, self._families = folder, tuple(column_families)
        self._stores: dict[int, Store] = {}
        self._on_write: list[Callable[[], None]] = []
        self._lock = threading.Lock()  # the roles' and the API's threads open stores

    def of(self, shard: int) -> Store:
        store = self._stores.get(shard)
        if store is not None:
            return store
        with self._lock:
            if shard not in self._stores:
                store = Store(self.folder / f"shard-{shard}", self._families)
                for listener in self._on_write:
                    store.on_write(listener)
                self._stores[shard] = store
            return self._stores[shard]

    def on_write(self, listener: Callable[[], None]) -> None:
        """`Store.on_write` for every store, those opened later too."""
        with self._lock:
            self._on_write.append(listener)
            for store in self._stores.values():
                store.on_write(listener)

    def close(self) -> None:
        with self._lock:
            for store in self._stores.values():
                store.close()
            self._stores.clear()


def shard_stores(state_dir: Path, column_families: Sequence[str]) -> ShardStores:
    """The shards' stores of a worker's state folder. A folder of the layout before (one store,
    `rocksdb`, for every shard) loses that store: it is an index of Kafka's topics, rebuilt from
    them like any other (DESIGN principle 1)."""
    shutil.rmtree(state_dir / "rocksdb", ignore_errors=True)
    return ShardStores(state_dir / "shards", column_families)
