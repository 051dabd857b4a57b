"""The sidecar process: owns the long-lived parts and starts/stops them in order.

Data flows one way: Kafka topics in -> local state (RocksDB) -> timers -> Kafka topics out. The
HTTP API (package `api`) reads local state and writes commands to Kafka.

One "roles" thread decides what this node does: while it is not the leader it follows the state
topics into RocksDB (a hot standby); once elected it fences the old leader, catches up, and runs
the leader loops until it loses leadership or stops. RocksDB thus has one writer at a time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import httpx
import structlog
from confluent_kafka import Message

from delay_service.leader import DelayLeader
from delay_service.schedules import COLUMN_FAMILIES as SCHEDULE_CFS
from delay_service.schedules import Schedule, ScheduleIndex
from revive.receipt import ReceiptCodec
from revive.service import PopService
from sidecar.async_producer import AsyncProducer
from sidecar.config import Settings
from sidecar.election import Election
from sidecar.health import KafkaProbe
from sidecar.kafka_clients import admin_client, base_config
from sidecar.metrics import KAFKA_REACHABLE
from sidecar.state_follower import OFFSETS_CF, StateFollower
from sidecar.store import Batch, Store
from sidecar.topics import COMPACTED, TopicCache, TopicSpec, ensure_topics

log = structlog.get_logger(__name__)

LEADER_RETRY_S = 1.0
LEADER_URL_TTL_S = 1.0


class Sidecar:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.client_config = base_config(settings)
        self.admin = admin_client(settings)
        self.probe = KafkaProbe(self.admin)
        KAFKA_REACHABLE.set_function(lambda: float(self.probe.reachable))
        self.store = Store(settings.state_dir / "rocksdb", [*SCHEDULE_CFS, OFFSETS_CF])
        self.schedules = ScheduleIndex(self.store)
        self.api_producer = AsyncProducer(self.client_config)
        self.topic_cache = TopicCache(self.api_producer, settings.kafka_timeout_ms / 1000)
        self._topics_ready = False
        self._stopping = threading.Event()
        self._roles = threading.Thread(target=self._roles_loop, name="roles", daemon=True)
        self.election: Election | None = None
        self.follower: StateFollower | None = None
        self.pop_service: PopService | None = None
        self.http = httpx.AsyncClient()  # forwards pop-group calls to the leader
        self._leader_url: tuple[float, str | None] = (0.0, None)
        self._codec = ReceiptCodec(_receipt_secret(settings))
        self._undeliverable: dict[str, str] = {}  # see DelayLeader

    def owned_topics(self) -> list[TopicSpec]:
        s = self.settings
        return [
            TopicSpec(s.buffer_topic),
            TopicSpec(s.invalid_topic),
            TopicSpec(s.delivery_log_topic),
            TopicSpec(s.state_topic("schedules"), COMPACTED),
            TopicSpec(s.state_topic("leader"), partitions=1),
            TopicSpec(s.state_topic("pop-state")),
        ]

    def start(self) -> None:
        log.info("sidecar starting", node=self.settings.node_id, bootstrap=self.settings.bootstrap)
        self.probe.start()
        self._roles.start()

    def stop(self) -> None:
        self._stopping.set()
        self._roles.join(timeout=60)
        self.probe.stop()
        self.api_producer.close()
        self.store.close()
        log.info("sidecar stopped", node=self.settings.node_id)

    def not_ready_reasons(self) -> list[str]:
        """Empty when the sidecar can serve; otherwise why not, for /readyz."""
        reasons = []
        if not self.probe.reachable:
            reasons.append(f"kafka unreachable: {self.probe.last_error}")
        if not self._topics_ready:
            reasons.append("kpd topics not created yet")
        if self.election is None or not self.election.leader_known:
            reasons.append("leader not known yet")
        if self.follower is None or not self.follower.caught_up:
            reasons.append("state not caught up yet")
        if self.is_leader and self.pop_service is None:
            reasons.append("taking over leadership")
        return reasons

    @property
    def is_leader(self) -> bool:
        return self.election is not None and self.election.is_leader

    def leader_url(self) -> str | None:
        """The leader's HTTP address, asked of the election group at most once a second."""
        checked, url = self._leader_url
        if self.election is None:
            return None
        if url is None or time.monotonic() - checked > LEADER_URL_TTL_S:
            url = self.election.leader_url(self.admin, self.settings.kafka_timeout_ms / 1000)
            self._leader_url = (time.monotonic(), url)
        return url

    # -- roles -----------------------------------------------------------------------------

    def _roles_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self._set_up()
                break
            except Exception as error:  # Kafka not there yet: keep trying, /readyz says why
                log.warning("cannot start yet", error=str(error))
                self._stopping.wait(LEADER_RETRY_S)
        while not self._stopping.is_set():
            try:
                if self.is_leader:
                    self._lead()
                else:
                    self._follow()
            except Exception:
                log.exception("role failed; rebuilding it from Kafka")
                self._stopping.wait(LEADER_RETRY_S)
        if self.election is not None:
            self.election.stop()
        if self.follower is not None:
            self.follower.close()

    def _set_up(self) -> None:
        s = self.settings
        ensure_topics(
            self.admin,
            self.owned_topics(),
            s.topic_partitions,
            s.topic_replication,
            s.kafka_timeout_ms / 1000,
        )
        self._topics_ready = True
        self.follower = StateFollower(
            self.client_config, self.store, {s.state_topic("schedules"): self._apply_schedules}
        )
        self.follower.assign()
        self.follower.catch_up(timeout_s=300)
        self.election = Election(
            self.client_config,
            s.state_topic("leader"),
            s.state_topic("leader"),
            s.election_session_timeout_ms,
            s.url,
        )
        self.election.start()

    def _apply_schedules(self, batch: Batch, messages: Sequence[Message]) -> None:
        records = []
        for message in messages:
            try:
                records.append(Schedule.decode(message.key().decode(), message.value()))
            except Exception as error:  # a foreign record must not stop every follower
                log.warning(
                    "skipping a record kpd did not write",
                    topic=message.topic(),
                    offset=message.offset(),
                    error=str(error),
                )
        self.schedules.stage(batch, records)

    def _follow(self) -> None:
        assert self.follower is not None
        self.follower.assign()  # from the stored positions (a former leader stored its own)
        while not self._stopping.is_set() and not self.is_leader:
            self.follower.poll_once(0.1)

    def _lead(self) -> None:
        """Run both leader loops until leadership ends; any failure rebuilds both from Kafka."""
        assert self.follower is not None
        delay = DelayLeader(self.settings, self.store, self.client_config, self._undeliverable)
        pop = PopService(self.settings, self.client_config, self.admin, self._codec)
        pop_failed = threading.Event()
        leading = threading.Event()
        pop_thread = threading.Thread(
            target=self._serve_pops,
            args=(pop, leading, pop_failed),
            name="pop-service",
            daemon=True,
        )
        try:
            delay.start(self.follower)
            pop.start()
            leading.set()
            self.pop_service = pop
            pop_thread.start()
            while not self._stopping.is_set() and self.is_leader and not pop_failed.is_set():
                delay.step()
            if pop_failed.is_set():
                raise RuntimeError("pop service failed")
        finally:
            self.pop_service = None
            leading.clear()
            if pop_thread.is_alive():
                pop_thread.join(timeout=30)
            pop.close()
            delay.close()

    @staticmethod
    def _serve_pops(pop: PopService, leading: threading.Event, failed: threading.Event) -> None:
        try:
            while leading.is_set():
                pop.step()
        except Exception:
            log.exception("pop service failed")
            failed.set()


def _receipt_secret(settings: Settings) -> bytes:
    if settings.receipt_secret is not None:
        return settings.receipt_secret.get_secret_value().encode()
    log.warning(
        "KPD_RECEIPT_SECRET is not set: using a development secret; set the same secret "
        "on every sidecar in production"
    )
    return b"kpd-development-receipt-secret"
