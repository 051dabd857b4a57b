"""A sidecar worker: owns the long-lived parts and starts/stops them in order.

Data flows one way: Kafka topics in -> local state (RocksDB) -> timers -> Kafka topics out. The
HTTP API (package `api`) reads local state and writes commands to Kafka.

A "conductor" thread sets kpd's topics up, joins the group that hands out shards, and then keeps
the roles of the shards this worker leads running (`cluster.conductor`), with a standby following
the shards it would take over next. Every loop beats a heartbeat the watchdog checks (principle
7); a worker whose loops stall for good, or whose Kafka clients stay broken, exits for `kpd run`
to start a fresh one.
"""

from __future__ import annotations

import threading

import structlog

from api.index_writes import IndexWrites
from cluster.conductor import Conductor
from cluster.membership import Membership
from cluster.owners import Owners, group_reasons
from cluster.routing.availability import Availability
from cluster.routing.forwarding import CONNECT_TIMEOUT_S
from cluster.shard_roles import ShardRoles
from cluster.successor import Successor
from delay_service.ingest_turns import IngestTurns
from delay_service.leader import DelayDeps
from delay_service.schedules import COLUMN_FAMILIES as SCHEDULE_CFS
from delay_service.schedules import Freshness, ScheduleIndex
from foundation.async_producer import AsyncProducer
from foundation.broker_clock import BrokerClock
from foundation.config import Settings
from foundation.folder_watch import FolderWatch
from foundation.garbage_collection import GcPauses
from foundation.kafka_clients import admin_client, base_config, producer_config
from foundation.kafka_probe import KafkaProbe
from foundation.memory_trim import MemoryTrim
from foundation.peer_http import PeerHttp
from foundation.shards import ShardMap
from foundation.state_follower import OFFSETS_CF
from foundation.store import Store, shard_stores
from foundation.topics import TopicCache
from foundation.watchdog import Watchdog
from revive.arrivals import ArrivalWatch
from revive.receipt import ReceiptCodec, receipt_secret
from revive.service import PopDeps, PopService
from sidecar.clock_gate import ClockGate
from sidecar.readiness import role_reasons, waiting_workers
from sidecar.self_heal import SelfHeal, exit_for_restart
from sidecar.topology import kpd_topic_names, set_up
from sidecar.workers import StartedWorkers

log = structlog.get_logger(__name__)

SETUP_RETRY_S = 1.0
HEAL_AFTER_S = 15.0  # unready this long from broken clients while fresh ones work: restart
# A stopping worker's shards deliver from here until their new owners fence them, this long at
# most: well within the 18 s a stop may take (`sidecar.run`).
HANDOVER_ON_STOP_S = 5.0
# The conductor reconciles when the group, the shards taken over early, the ring of members, a
# role, a store claim or the clock's fit changes, and at its own deadlines; at least this often,
# a bound for a missed event (claims are watched with inotify: without it, a sibling's claim).
RECONCILE_AT_LEAST_S = 5.0


class Sidecar:
    def __init__(
        self, settings: Settings, url: str | None = None, started: StartedWorkers | None = None
    ) -> None:
        self.settings = settings
        self._owned_topics = frozenset(kpd_topic_names(settings))
        self.url = url or settings.url  # a worker's own address, when there are several
        self._started = started  # this sidecar's workers that have been ready once
        self.client_config = base_config(settings)
        self.producer_config = producer_config(settings)
        self.admin = admin_client(settings)
        self.probe = KafkaProbe(self.admin, settings.state_topic("leader"))
        self.stores = shard_stores(
            settings.state_dir, settings.shard_stores_dir, [*SCHEDULE_CFS, OFFSETS_CF]
        )
        self.shard_map = ShardMap(1, 1)  # until the topics say how many shards there are
        self.schedules = ScheduleIndex(self.stores, self.shard_map)
        # Roles open stores only once the topics say how many shards there are (`_set_up`).
        self.stores.on_open(self._check_format)
        self.api_producer = AsyncProducer(self.producer_config)
        self.topic_cache = TopicCache(self.api_producer, settings.kafka_timeout_ms / 1000)
        # Idle connections go at half the peers' keep-alive (the same setting): one reused just
        # as its peer closes it would fail the call.
        self.http = PeerHttp(settings.http_keep_alive_ms / 2000, CONNECT_TIMEOUT_S)
        self.codec = ReceiptCodec(receipt_secret(settings))
        self.availability = Availability()
        self.index_writes = IndexWrites()
        self.stores.on_write(self.index_writes.written)
        timeout_s = settings.kafka_timeout_ms / 1000
        # A step that waits on Kafka longer than every call of it could: stuck for good.
        self.watchdog = Watchdog(
            report_after_s=max(1.0, timeout_s / 2),
            give_up_after_s=3 * timeout_s + 5,
            on_stall=lambda health: exit_for_restart(f"{health.name} stalled", self.membership),
        )
        self.memory_trim = MemoryTrim()
        self.gc_pauses = GcPauses()
        self.self_heal = SelfHeal(
            self.client_config,
            self.not_ready_reasons,
            HEAL_AFTER_S,
            lambda why: exit_for_restart(why, self.membership),
        )
        self.membership: Membership | None = None
        self._owners: Owners | None = None
        self._successor: Successor | None = None
        self.broker_clock: BrokerClock | None = None
        self._clock_gate = ClockGate(settings.max_clock_offset_ms)
        self._conductor: Conductor | None = None
        self._arrivals: ArrivalWatch | None = None
        self._claims_watch: FolderWatch | None = None
        self._topics_ready = False
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._conduct, name="conductor", daemon=True)
        self._roles: ShardRoles | None = None  # once the topics say how many shards there are

    # -- the Node the API sees -------------------------------------------------------------

    def owned_topics(self) -> frozenset[str]:
        return self._owned_topics

    def pop_service(self, shard: int) -> PopService | None:
        return self._conductor.pop_service(shard) if self._conductor is not None else None

    def freshness(self, shard: int) -> Freshness:
        conductor = self._conductor
        return conductor.freshness(shard) if conductor is not None else Freshness.CATCHING_UP

    def owners(self) -> dict[int, str]:
        return self._owners.by_shard if self._owners is not None else {}

    def routes(self) -> dict[int, str]:
        return self._owners.routes() if self._owners is not None else {}

    def unreachable(self, url: str) -> None:
        if self._owners is not None:
            self._owners.refused(url)

    def partitions(self, topic: str) -> int:
        return self.topic_cache.partitions(topic)

    def not_ready_reasons(self) -> list[str]:
        """Empty when the sidecar can serve; otherwise why not, for /readyz."""
        reasons = []
        if not self.probe.reachable:
            reasons.append(f"kafka unreachable: {self.probe.last_error}")
        if not self._topics_ready:
            reasons.append("kpd topics not created yet")
        reasons += group_reasons(self.membership, self._owners)
        reasons += self._clock_gate.reasons()
        reasons += role_reasons(self._conductor, self.membership)
        reasons += self.watchdog.problems()
        group = (self._owners, self.membership)
        ready_here = not reasons
        waiting = waiting_workers(self._started, group, self.url, self.shard_map.shards, ready_here)
        if waiting:
            reasons.append(f"workers starting: {waiting} of {self.settings.workers} not ready yet")
        return reasons

    def start(self) -> None:
        log.info("sidecar starting", node=self.settings.node_id, bootstrap=self.settings.bootstrap)
        self.probe.start()
        self.watchdog.start()
        self.self_heal.start()
        self.memory_trim.start()
        self.gc_pauses.start()
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self.membership is not None:
            self.membership.changed.set()  # the conductor's wait
        self._thread.join(timeout=30)
        self.self_heal.stop()
        self.memory_trim.stop()
        self.gc_pauses.stop()
        self.watchdog.stop()
        self.probe.stop()
        self.api_producer.close()
        self.stores.close()
        log.info("sidecar stopped", node=self.settings.node_id)

    # -- the conductor thread --------------------------------------------------------------

    def _conduct(self) -> None:
        while not self._stopping.is_set():
            try:
                self._set_up()
                break
            except Exception as error:  # Kafka not there yet: keep trying, /readyz says why
                log.warning("cannot start yet", error=str(error))
                self._stopping.wait(SETUP_RETRY_S)
        if self.membership is None or self._conductor is None or self._roles is None:
            return
        try:
            while not self._stopping.is_set():
                self.membership.changed.clear()
                self.membership.paused = not self._clock_gate.fit()
                early = self._successor.shards if self._successor is not None else frozenset()
                lead = self.membership.owned | early if not self.membership.paused else frozenset()
                self._conductor.reconcile(lead, self._roles.next_to_take())
                due_s = self._conductor.wait_s()
                bound = RECONCILE_AT_LEAST_S
                self.membership.changed.wait(bound if due_s is None else min(due_s, bound))
        finally:
            self.membership.stop()  # leave first: the group moves this worker's shards at once
            # Their new owners read them before they fence the roles here.
            self._conductor.leave(HANDOVER_ON_STOP_S, self._others_in_group)
            self._conductor.stop()
            helpers = (self._owners, self._successor, self.broker_clock, self._arrivals)
            for helper in (*helpers, self._claims_watch):
                if helper is not None:
                    helper.stop()

    def _set_up(self) -> None:
        s = self.settings
        self.shard_map = set_up(self.admin, s)
        self.schedules.shards = self.shard_map
        self._topics_ready = True
        place = (0 if self._started is None else self._started.index, s.url)
        self.membership = Membership(
            self.client_config, s.state_topic("leader"), s.election_session_timeout_ms, self.url,
            place,
        )  # fmt: skip
        # Clients of its own: their requests may stay pending through an outage (`cluster.owners`).
        self._owners = Owners(self.membership, lambda: admin_client(s))
        self._successor = Successor(self._owners, self.url) if s.early_takeover else None
        clock = BrokerClock(self.producer_config, s.state_topic("clock"), s.node_id)
        self.broker_clock = clock
        roles = ShardRoles(
            DelayDeps(
                s, self.schedules, self.client_config, self.producer_config,
                self._owned_topics, lambda: clock.margin_ms, IngestTurns(),
            ),
            PopDeps(
                s, self.client_config, self.producer_config, self.admin, self.codec,
                self.shard_map, self.availability.notify, self.availability.awaited,
            ),
            self._owners,
            self.url,
            place,
        )  # fmt: skip
        self._roles = roles
        wake = self.membership.changed.set
        self._conductor = Conductor(
            self.watchdog, {"delay": roles.delay, "pop": roles.pop}, roles.standby,
            roles.schedules_kept, wake,
        )  # fmt: skip
        self._owners.on_change = wake
        self._clock_gate.watch(clock, self.membership)
        if self._successor is not None:
            self._successor.on_change = wake
        self._claims_watch = self.stores.claims.on_change(wake)
        conductor, membership = self._conductor, self.membership
        self.membership.on_revoked = lambda shards: conductor.await_released(
            shards, s.kafka_timeout_ms / 1000, wake=membership.changed.set
        )
        clock.start()
        self.membership.paused = True  # until the clock is measured
        self.membership.start()
        self._owners.start()
        if self._successor is not None:
            self._successor.start()
        self._arrivals = ArrivalWatch(
            self.client_config, self._conductor.pop_services, self.availability.awaited_keys,
            self.availability.parked, s.kafka_timeout_ms / 1000,
        )  # fmt: skip
        self._arrivals.start()

    def _check_format(self, shard: int, store: Store) -> None:
        if self.schedules.ensure_format(store, OFFSETS_CF, self.settings.state_topic("schedules")):
            log.info("shard's index cleared for this layout; rebuilding it from Kafka", shard=shard)

    def _others_in_group(self) -> bool:
        """Are other members in the group, as last seen (refreshed every second)?"""
        owners = self._owners
        return owners is not None and any(member.url != self.url for member in owners.ring.members)
