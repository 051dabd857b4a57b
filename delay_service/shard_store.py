"""How a shard's delay role takes its shard's store (`foundation.store.ShardStores`).

The workers of a sidecar share the shards' folders, and RocksDB lets one process at a time open
one. Free (the shard's last holder was another sidecar, or a worker of this one that died), the
store is taken as it is and read on from where its last writer left it. Held by another worker of
this sidecar, it is that worker's delay role handing the shard over, delivering until fenced, or
its standby about to drop the shard: the new role fences first, so the old one stops and lets go,
and waits for that. A holder that does not let go in time is stopped (SIGSTOP, a hung machine)
and may never: the role then rebuilds the shard's index from Kafka in a store of its own, as a
worker of another sidecar would (DESIGN principle 1).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog

from delay_service import metrics
from foundation.store import ShardStores, StoreBusy

log = structlog.get_logger(__name__)

HOLDER_RELEASE_S = 5.0  # a fenced delay role ends within a fence probe (0.5 s) and a reconcile
RETRY_S = 0.05


def take_store(
    stores: ShardStores,
    shard: int,
    fence: Callable[[], None],
    beat: Callable[[], None],
    release_s: float = HOLDER_RELEASE_S,
) -> bool:
    """Hold the shard's store for its delay role; True if `fence()` was called to free it."""
    try:
        stores.acquire(shard)
        return False
    except StoreBusy:
        log.info("shard's store held by another worker; fencing it first", shard=shard)
    fence()
    deadline = time.monotonic() + release_s
    while time.monotonic() < deadline:
        beat()
        time.sleep(RETRY_S)
        try:
            stores.acquire(shard)
            return True
        except StoreBusy:
            continue
    log.warning(
        "shard's store still held; rebuilding its index from Kafka", shard=shard, waited_s=release_s
    )
    metrics.STORES_REBUILT.inc()
    stores.acquire_private(shard)
    return True
