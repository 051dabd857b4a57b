"""Is Kafka reachable? A background probe, so `/readyz` answers at once and never blocks."""

from __future__ import annotations

import structlog
from confluent_kafka.admin import AdminClient

from foundation.metrics import KAFKA_REACHABLE
from foundation.periodic import PeriodicThread

log = structlog.get_logger(__name__)


class KafkaProbe(PeriodicThread):
    """Asks the cluster for the metadata of `topic` every `interval_s` (the brokers come with
    any topic's; all topics' would be as many as a shared cluster holds, every second);
    `reachable` is the last answer. Not a DescribeCluster, though cheaper: librdkafka 2.16
    aborted the process on one while the broker was paused (assertion `rko_result' in
    rd_kafka_admin_response_parse)."""

    def __init__(
        self, admin: AdminClient, topic: str, interval_s: float = 1.0, timeout_s: float = 2.0
    ) -> None:
        super().__init__("kafka-probe", interval_s, join_s=timeout_s + 1)
        self._admin, self._topic = admin, topic
        self._timeout_s = timeout_s
        self.reachable = False
        self.last_error = "not probed yet"

    def tick(self) -> None:
        try:
            brokers = self._admin.list_topics(topic=self._topic, timeout=self._timeout_s).brokers
            reachable, error = bool(brokers), "" if brokers else "no broker in metadata"
        except Exception as exc:  # any client error means "not reachable now"
            reachable, error = False, str(exc)
        if reachable != self.reachable:
            log.info("kafka reachability changed", reachable=reachable, error=error or None)
        self.reachable, self.last_error = reachable, error
        KAFKA_REACHABLE.set(float(reachable))
