"""Shard stores for tests that read or write an index outside a worker."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from foundation.store import ShardStores


def held_stores(folder: Path, column_families: Sequence[str], shards: int) -> ShardStores:
    """`ShardStores` holding every shard's store, as the roles of a worker leading them all do."""
    stores = ShardStores(folder, column_families)
    for shard in range(shards):
        stores.acquire(shard)
    return stores
