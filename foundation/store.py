"""The local RocksDB index (DESIGN principle 1: Kafka is the truth, this is a rebuildable cache).

Raw byte keys and values only; each owner of state (schedules, leases, offsets) gets its own column
family so its key space can be range-scanned and its layout changed independently. Changes that
belong together go into one `WriteBatch`, so a crash never leaves half of them on disk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import rocksdict

# Memtables are RocksDB's main memory cost: 64 MB x 2 per column family by default, with no cap
# across families (measured: RSS grew to 430 MB at 5M schedules). Small memtables and one shared
# budget keep memory flat as the backlog grows; bigger ones would only batch flushes more.
WRITE_BUFFER_BYTES = 8 * 1024 * 1024
TOTAL_WRITE_BUFFER_BYTES = 32 * 1024 * 1024


def _family_options() -> rocksdict.Options:
    options = rocksdict.Options(raw_mode=True)
    options.set_write_buffer_size(WRITE_BUFFER_BYTES)
    options.set_max_write_buffer_number(2)
    return options


def _options() -> rocksdict.Options:
    options = _family_options()
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    options.set_db_write_buffer_size(TOTAL_WRITE_BUFFER_BYTES)
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
