"""The standby of a worker: it follows the shards led elsewhere, so a takeover starts hot.

It applies the schedules of the shards it keeps (`ShardRoles.schedules_kept`) to their stores,
which it holds meanwhile (a store another worker of this sidecar still holds is left out, and
tried again when the conductor restarts the standby), and the pop state of the shards it would
take over next to memory (`revive.pop_follower`). `cluster.conductor` starts it, and restarts it
whenever the shards to follow or to keep change.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog
from confluent_kafka import KafkaException

from foundation.metrics import SHARD_SCHEDULES_KEPT, STANDBY_CPU
from foundation.state_follower import StateFollower
from foundation.store import ShardStores, StoreBusy
from foundation.supervision import LoopHealth
from revive.metrics import STANDBY_CHECKPOINTS
from revive.pop_follower import PopFollower
from revive.replay import PopStateReader

log = structlog.get_logger(__name__)

# A standby step's wait for schedule records when none have come (records end it at once): the
# bound of its stop, which the conductor waits for when the shards to follow change.
STANDBY_WAIT_S = 0.25
RELEASED_EVERY_S = 2.0  # how often the standby forgets checkpoints their leaders released
Shards = frozenset[int]


class Standby:
    """Follows shards led elsewhere: the schedules of those it keeps into their stores, the pop
    state of those it would take over next into memory (`revive.pop_follower`)."""

    def __init__(
        self,
        stores: ShardStores,
        # The shards to keep, and a reading of the schedules of those `kept()` names.
        schedules: tuple[Shards, Callable[[Callable[[], Shards]], StateFollower]],
        pops: tuple[PopFollower, PopStateReader, Shards],
        health: LoopHealth,
    ) -> None:
        self._stores, self._health = stores, health
        self.wanted, reading = schedules
        self._pops, self._reader, self._shards = pops
        self.kept: Shards = frozenset()  # the shards whose stores it holds (start)
        self.started_at = time.monotonic()
        self._follower = reading(lambda: self.kept)
        self._released_at = 0.0

    def start(self) -> None:
        self.kept = frozenset(filter(self._hold, sorted(self.wanted)))
        for shard in self.kept:
            SHARD_SCHEDULES_KEPT.labels(str(shard)).set(1)
        self._follower.assign()  # from the stored positions (a former leader stored its own)
        self._pops.follow(self._reader, self._shards)
        self._follower.catch_up(timeout_s=300, beat=self._health.beat_unless_stopping)

    def _hold(self, shard: int) -> bool:
        try:
            self._stores.acquire(shard)
        except StoreBusy:  # another worker lets it go soon: kept from the next start on
            log.info("shard's store held by another worker; not kept for now", shard=shard)
            return False
        return True

    def step(self) -> None:
        # The wait is on the schedules: a POST answered here waits until this index shows its
        # schedule. While it waited on the pop state too, half the step, such a POST took 50 ms
        # at p50 against 16 at the shard's owner; the pop state only has to be ready for a
        # takeover, so it takes what has come, once a step.
        started = time.thread_time()
        self._follower.poll_once(STANDBY_WAIT_S)
        self._pops.apply(self._reader, 0)
        self._pops.positions(self._reader)
        if time.monotonic() - self._released_at >= RELEASED_EVERY_S:
            self._released_at = time.monotonic()
            self._forget_released()
        STANDBY_CPU.inc(time.thread_time() - started)

    def _forget_released(self) -> None:
        """Housekeeping that may skip a round: a failed look at the replay floors (the group
        coordinator moving while the broker restarts, Kafka away) waits for the next one. It
        restarted the whole standby 11 times in 10 broker restarts, each time reading the
        followed partitions again."""
        try:
            STANDBY_CHECKPOINTS.set(self._pops.forget_released(self._reader))
        except KafkaException as error:
            log.warning("released checkpoints not looked up this round", error=str(error))

    def close(self) -> None:
        self._follower.close()
        self._reader.close()
        for shard in self.kept:
            SHARD_SCHEDULES_KEPT.labels(str(shard)).set(0)
            self._stores.release(shard)
        self.kept = frozenset()
