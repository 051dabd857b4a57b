"""The local RocksDB index (docs/principles.md, 1: Kafka is the truth, this is a rebuildable cache).

Raw byte keys and values only; each owner of state (schedules, leases, offsets) gets its own column
family so its key space can be range-scanned and its layout changed independently. Changes that
belong together go into one `WriteBatch`, so a crash never leaves half of them on disk. Each
shard's state is a store of its own, in a folder the workers of a sidecar share (`ShardStores`).
"""

from __future__ import annotations

import functools
import os
import shutil
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import rocksdict

from foundation.processes import alive
from foundation.store_claims import StoreClaims

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

    def putter(self, family: str) -> Callable[[bytes, bytes], None]:
        """`put` into one family as a C-level call (no Python frame): for a put per record."""
        return functools.partial(self.raw.put, column_family=self._handles[family])

    def delete(self, family: str, key: bytes) -> None:
        self.raw.delete(key, self._handles[family])


class StoreBusy(Exception):
    """Another process holds the shard's store (RocksDB's LOCK file): a worker of the same
    sidecar that leads or keeps the shard, or still hands it over."""


class NotHeld(LookupError):
    """This process holds no store of the shard (another worker or sidecar keeps it)."""


class ShardStores:
    """The shards' stores, each in a folder of its own under `folder`, shared by the workers of
    one sidecar: a worker opens the stores of the shards it leads or keeps (`acquire`) and
    closes them when it lets the shard go (`release`), so that a worker of the same machine
    taking a shard over opens the same folder, as hot as its last writer left it, instead of
    keeping a copy of its own (Kafka Streams keeps one state folder per task the same way, for
    whichever thread runs the task). RocksDB's LOCK file makes the hold exclusive between
    processes; one the holder died with (SIGKILL) is free again at once.

    Inside the process a store is counted: the roles that hold it and the API's reads of it
    (`borrowed`) share one open store, closed when the last lets go. Stores share the process's
    memtable budget and block cache (above)."""

    def __init__(self, folder: Path, column_families: Sequence[str]) -> None:
        self.folder, self._families = folder, tuple(column_families)
        self._held: dict[int, tuple[Store, int]] = {}  # shard -> (store, holders)
        self._on_write: list[Callable[[], None]] = []
        self._on_open: list[Callable[[int, Store], None]] = []
        self._lock = threading.Lock()  # the roles' and the API's threads hold stores
        _drop_private_folders(folder)
        self.claims = StoreClaims(folder / "claims")  # which shards siblings' roles hold

    def acquire(self, shard: int) -> Store:
        """Hold `shard`'s store, opening it if no one here holds it yet. Raises `StoreBusy` if
        another process holds it."""
        with self._lock:
            held = self._held.get(shard)
            if held is None:
                held = (self._open(shard, self.folder / f"shard-{shard}"), 0)
            self._held[shard] = (held[0], held[1] + 1)
            return held[0]

    def acquire_private(self, shard: int) -> Store:
        """Hold an empty store of `shard` in a folder of this process alone, for a holder that
        cannot wait for the shared one (a stopped process keeps its LOCK): it is rebuilt from
        Kafka, and dropped when released. Raises `StoreBusy` if `shard` is held here."""
        with self._lock:
            if shard in self._held:
                raise StoreBusy(f"shard {shard} is held in this process")
            folder = self.folder / f"shard-{shard}.{os.getpid()}"
            shutil.rmtree(folder, ignore_errors=True)
            self._held[shard] = (self._open(shard, folder), 1)
            return self._held[shard][0]

    def release(self, shard: int) -> None:
        """Let go of one hold of `shard`'s store; the last closes it (a private one is dropped)."""
        with self._lock:
            store, holders = self._held[shard]
            if holders > 1:
                self._held[shard] = (store, holders - 1)
                return
            del self._held[shard]
            _close(shard, store)

    def of(self, shard: int) -> Store:
        """The store of a shard held here. Raises `NotHeld` otherwise."""
        held = self._held.get(shard)
        if held is None:
            raise NotHeld(f"shard {shard}'s store is not held here")
        return held[0]

    @contextmanager
    def borrowed(self, shard: int) -> Iterator[Store]:
        """A held store for one read from another thread (the API), which it stays open for.
        Raises `NotHeld` if no role here holds it."""
        with self._lock:
            if shard not in self._held:
                raise NotHeld(f"shard {shard}'s store is not held here")
            store, holders = self._held[shard]
            self._held[shard] = (store, holders + 1)
        try:
            yield store
        finally:
            self.release(shard)

    def on_write(self, listener: Callable[[], None]) -> None:
        """`Store.on_write` for every store, those opened later too."""
        with self._lock:
            self._on_write.append(listener)
            for store, _ in self._held.values():
                store.on_write(listener)

    def on_open(self, check: Callable[[int, Store], None]) -> None:
        """Call `check(shard, store)` as each store opens, before any holder uses it (the
        schedule index clears a store of another layout)."""
        self._on_open.append(check)

    def close(self) -> None:
        with self._lock:
            for shard, (store, _) in self._held.items():
                _close(shard, store)
            self._held.clear()

    def _open(self, shard: int, folder: Path) -> Store:
        try:
            store = Store(folder, self._families)
        except Exception as error:  # rocksdict raises a bare Exception
            # "While lock file: <folder>/LOCK: Resource temporarily unavailable" from another
            # process; "lock hold by current process ... <folder>/LOCK" from another ShardStores.
            if f"{folder}/LOCK" in str(error):
                raise StoreBusy(f"shard {shard}'s store is held by another process") from error
            raise
        for listener in self._on_write:
            store.on_write(listener)
        for check in self._on_open:
            check(shard, store)
        return store


def _close(shard: int, store: Store) -> None:
    """Close a shard's store; a private one (`acquire_private`) is dropped too."""
    store.close()
    if store.path.name != f"shard-{shard}":
        shutil.rmtree(store.path, ignore_errors=True)


def _drop_private_folders(folder: Path) -> None:
    """Private stores (`acquire_private`) of processes that ended without dropping them."""
    for path in folder.glob("shard-*.*"):
        pid = path.name.rsplit(".", 1)[1]
        if pid.isdigit() and not alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def shard_stores(state_dir: Path, shards_dir: Path, column_families: Sequence[str]) -> ShardStores:
    """The shards' stores of a sidecar (`shards_dir`, shared by its workers). A worker's folder
    of a layout before drops its own stores: one store for every shard (`rocksdb`), or the
    shard stores of this worker alone (`shards` in a worker's folder). They are indexes of
    Kafka's topics, rebuilt from them like any other (docs/principles.md, 1)."""
    shutil.rmtree(state_dir / "rocksdb", ignore_errors=True)
    if (state_dir / "shards").resolve() != shards_dir.resolve():
        shutil.rmtree(state_dir / "shards", ignore_errors=True)
    return ShardStores(shards_dir, column_families)
