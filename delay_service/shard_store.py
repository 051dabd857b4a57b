"""How a shard's delay role takes its shard's store (`foundation.store.ShardStores`) and gives it
back: claim, wait, fence, rebuild, release.

The workers of a sidecar share the shards' folders, and RocksDB lets one process at a time open
one. Free (the shard's last holder was another sidecar, or a worker of this one that died), the
store is taken as it is and read on from where its last writer left it. Held by another worker of
this sidecar, it is that worker's standby, which lets the shard go once the role has claimed it
(`foundation.store_claims`; within a reconcile, 0.1 s, and the standby's restart), or that
worker's delay role handing the shard over, which delivers until fenced. Such a role claims the
shard too, so the new role fences it at once: waiting would gain nothing, as no reading can start
before the store is free. Held without such a claim (a standby), the store is waited for a while
without fencing anyone, so that the shard's old owner, wherever it is, delivers meanwhile; then
the role fences, which ends a delay role still handing over here and frees its store. A
holder that does not let go even then is stopped (SIGSTOP, a hung machine) and may never: the
role then rebuilds the shard's index from Kafka in a store of its own, as a worker of another
sidecar would (docs/principles.md, 1).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog

from delay_service import metrics
from foundation.store import ShardStores, StoreBusy

log = structlog.get_logger(__name__)

UNFENCED_WAIT_S = 3.0  # a standby lets go of a claimed store within a reconcile and a restart
HOLDER_RELEASE_S = 5.0  # a fenced delay role ends within a fence probe (0.5 s) and a reconcile
REFENCE_S = 1.0  # a sibling's role still claiming the shard is fenced again this often
RETRY_S = 0.05


def take_store(
    stores: ShardStores,
    shard: int,
    fence: Callable[[], None],
    beat: Callable[[], None],
    waits_s: tuple[float, float] = (UNFENCED_WAIT_S, HOLDER_RELEASE_S),
) -> bool:
    """Hold the shard's store for its delay role, claimed (`foundation.store_claims`; the role
    drops the claim when it lets the store go); True if `fence()` was called to free it. Each
    call of `fence()` fences anew (new epochs)."""
    stores.claims.claim(shard)  # a sibling's standby holding the store lets it go
    try:
        return _taken(stores, shard, fence, beat, waits_s)
    except BaseException:  # given away while waiting (`StopRequested`), or the fence failed
        stores.claims.unclaim(shard)
        raise


def give_back_store(stores: ShardStores, shard: int) -> None:
    """The role lets the store go, then drops its claim: a sibling's standby may take it now."""
    stores.release(shard)
    stores.claims.unclaim(shard)


def _taken(
    stores: ShardStores,
    shard: int,
    fence: Callable[[], None],
    beat: Callable[[], None],
    waits_s: tuple[float, float],
) -> bool:
    unfenced_s, fenced_s = waits_s
    if _acquired(stores, shard, 0.0, beat):
        return False
    if shard in stores.claims.elsewhere():  # a sibling's delay role: it lets go once fenced
        log.info("shard's store held by a sibling's delay role; fencing", shard=shard)
    else:
        log.info("shard's store held by another worker; waiting for it", shard=shard)
        if _acquired(stores, shard, unfenced_s, beat):
            return False
        log.info("shard's store still held by another worker; fencing", shard=shard)
    if _fenced_free(stores, shard, fence, beat, fenced_s):
        return True
    log.warning(
        "shard's store still held; rebuilding its index from Kafka", shard=shard, waited_s=fenced_s
    )
    metrics.STORES_REBUILT.inc()
    stores.acquire_private(shard)
    return True


def _fenced_free(
    stores: ShardStores,
    shard: int,
    fence: Callable[[], None],
    beat: Callable[[], None],
    wait_s: float,
) -> bool:
    """Fence, then wait for the store until `wait_s` passed, fencing again every `REFENCE_S`
    while a sibling's delay role still claims the shard: one still starting fences the shard
    itself, maybe after this role did, and then hands over, delivering until fenced again. A
    standby holding the store writes nothing: fencing again would not free it sooner."""
    deadline = time.monotonic() + wait_s
    fence()
    while True:
        if _acquired(stores, shard, min(REFENCE_S, max(0.0, deadline - time.monotonic())), beat):
            return True
        if time.monotonic() >= deadline:
            return False
        if shard in stores.claims.elsewhere():
            fence()


def _acquired(stores: ShardStores, shard: int, wait_s: float, beat: Callable[[], None]) -> bool:
    """Hold the store within `wait_s`, trying every `RETRY_S`; False if another process held
    it all along."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            stores.acquire(shard)
            return True
        except StoreBusy:
            if time.monotonic() >= deadline:
                return False
        beat()
        time.sleep(RETRY_S)
