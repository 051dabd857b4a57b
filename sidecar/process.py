"""The sidecar process: owns the long-lived parts and starts/stops them in order.

Data flows one way: Kafka topics in -> local state (RocksDB) -> timers -> Kafka topics out. The
HTTP API (package `api`) only reads state and writes commands to Kafka.
"""

from __future__ import annotations

import structlog

from sidecar.config import Settings
from sidecar.health import KafkaProbe
from sidecar.kafka_clients import admin_client
from sidecar.metrics import KAFKA_REACHABLE
from sidecar.topics import TopicSpec, ensure_topics

log = structlog.get_logger(__name__)


class Sidecar:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.admin = admin_client(settings)
        self.probe = KafkaProbe(self.admin)
        KAFKA_REACHABLE.set_function(lambda: float(self.probe.reachable))
        self._topics_ready = False

    def owned_topics(self) -> list[TopicSpec]:
        s = self.settings
        return [
            TopicSpec(s.buffer_topic),
            TopicSpec(s.invalid_topic),
            TopicSpec(s.delivery_log_topic),
        ]

    def start(self) -> None:
        log.info("sidecar starting", node=self.settings.node_id, bootstrap=self.settings.bootstrap)
        self.probe.start()
        self._ensure_topics()

    def stop(self) -> None:
        self.probe.stop()
        log.info("sidecar stopped", node=self.settings.node_id)

    def not_ready_reasons(self) -> list[str]:
        """Empty when the sidecar can serve; otherwise why not, for /readyz."""
        reasons = []
        if not self.probe.reachable:
            reasons.append(f"kafka unreachable: {self.probe.last_error}")
        elif not self._topics_ready:
            self._ensure_topics()
        if not self._topics_ready:
            reasons.append("kpd topics not created yet")
        return reasons

    def _ensure_topics(self) -> None:
        s = self.settings
        try:
            ensure_topics(
                self.admin,
                self.owned_topics(),
                s.topic_partitions,
                s.topic_replication,
                s.kafka_timeout_ms / 1000,
            )
            self._topics_ready = True
        except Exception as error:  # retried on the next readiness check
            log.warning("cannot create kpd topics yet", error=str(error))
