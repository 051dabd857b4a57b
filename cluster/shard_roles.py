"""What a worker's roles are made of: each led shard's delay leader and pop service, and the
standby that follows the shards led elsewhere (`cluster.conductor` starts and stops them).

Made once the topics say how many shards there are. The parts every role of the worker shares
(clients, the RocksDB index, the clock's margin) come in `DelayDeps` and `PopDeps`; what outlives
a role is kept here: the verdicts of a shard's aborted delay steps (a restarted role never retries
a refused record) and the pop state the standby hands to a shard's new pop service.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from cluster.owners import Owners
from cluster.standby import Standby
from delay_service.leader import DelayDeps, DelayLeader
from delay_service.schedule_follower import schedule_reading
from foundation.state_follower import StateFollower
from foundation.supervision import LoopHealth
from revive.pop_follower import PopFollower
from revive.pop_state import orders_by_key
from revive.replay import PopStateReader
from revive.service import PopDeps, PopService

Shards = frozenset[int]


class ShardRoles:
    def __init__(
        self, delay: DelayDeps, pop: PopDeps, owners: Owners, url: str, place: tuple[int, str]
    ) -> None:
        self._delay, self._pop = delay, pop
        self._owners, self._url = owners, url
        self._index, self._home = place  # this worker's index among its sidecar's, the sidecar
        self._settings, self._shards = delay.settings, pop.shards
        self._pop_follower = PopFollower(pop.shards, orders_by_key(pop.settings))
        self._refused: dict[int, dict[Hashable, str]] = {}  # per shard (see DelayLeader)

    def delay(self, shard: int, health: LoopHealth) -> DelayLeader:
        return DelayLeader(self._delay, shard, health, self._refused.setdefault(shard, {}))

    def pop(self, shard: int, health: LoopHealth) -> PopService:
        return PopService(self._pop, shard, health, self._pop_follower.hand_over(shard))

    def next_to_take(self) -> Shards:
        """The shards this worker would take over next, so its standby keeps their pop state hot
        (the conductor leaves out those led here): those of the members its successor watch
        probes (`Ring.watched`) in other sidecars. A worker of this sidecar taking over from
        another replays the shard's pop state from its floor (bounded), as one whose watched
        member's shards moved elsewhere would: following a sibling's shards cost every worker of
        a sidecar a second apply of its sibling's records. Until the members are known, every
        shard."""
        ring = self._owners.ring
        if not ring.members:
            return frozenset(range(self._shards.shards))
        watched = (m for m in ring.watched(self._url) if m.home != self._home)
        return frozenset(s for member in watched for s in member.shards)

    def schedules_kept(self, led: Shards, follow: Shards) -> Shards:
        """The shards whose schedules a standby keeps, given the shards whose roles run here and
        those whose pop state it follows (`standby_schedules`). With "all": the shards of other
        sidecars, each kept by one worker of this sidecar (shard modulo workers), never those
        a worker of this sidecar leads: their stores are on this machine's disk, and a worker of
        it taking one over opens the folder its leader left (`delay_service.shard_store`). In
        either mode, none that another worker of this sidecar has claimed for a role since, as
        an early takeover does before the group shows the move (`foundation.store_claims`)."""
        claimed = self._delay.index.stores.claims.elsewhere()
        if self._settings.standby_schedules == "next":
            return follow - claimed
        homes = {s: m.home for m in self._owners.ring.members for s in m.shards}
        workers = self._settings.workers
        return frozenset(
            s
            for s in range(self._shards.shards)
            if s not in led
            and s not in claimed
            and homes.get(s) != self._home
            and s % workers == self._index
        )

    def standby(self, led: Shards, follow: Shards, keeps: Shards, health: LoopHealth) -> Standby:
        """A standby following the pop state of `follow` and keeping the schedules of `keeps`
        (`schedules_kept`, as the conductor worked it out), with `led` run here."""
        s, shards = self._settings, self._shards

        def reading(kept: Callable[[], Shards]) -> StateFollower:
            return schedule_reading(
                self._delay.client_config,
                self._delay.index,
                s.state_topic("schedules"),
                # The API forwards calls about a schedule of a shard not kept here to that
                # shard's owner (`api.schedules.owner_of`).
                only=lambda _, partition: shards.of_partition(partition) in kept(),
            )

        reader = PopStateReader(
            self._delay.client_config, s.state_topic("pop-state"), s.state_topic("pop-floor"),
            s.kafka_timeout_ms / 1000,
        )  # fmt: skip
        self._pop_follower.forget(frozenset(range(shards.shards)) - follow - led)
        schedules = (keeps, reading)
        pops = (self._pop_follower, reader, follow)
        return Standby(self._delay.index.stores, schedules, pops, health)
