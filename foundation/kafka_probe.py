"""Is Kafka reachable? A background probe, so `/readyz` answers at once and never blocks."""

from __future__ import annotations

import threading
import time

import structlog
from confluent_kafka.admin import AdminClient

from foundation.metrics import KAFKA_REACHABLE

log = structlog.get_logger(__name__)


class KafkaProbe:
    """Asks the cluster for metadata every `interval_s`; `reachable` is the last answer."""

    def __init__(self, admin: AdminClient, interval_s: float = 1.0, timeout_s: float = 2.0) -> None:
        self._admin = admin
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kafka-probe", daemon=True)
        self.reachable = False
        self.last_error = "not probed yet"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self._timeout_s + 1)

    def probe_once(self) -> bool:
        try:
            brokers = self._admin.list_topics(timeout=self._timeout_s).brokers
            reachable, error = bool(brokers), "" if brokers else "no broker in metadata"
        except Exception as exc:  # any client error means "not reachable now"
            reachable, error = False, str(exc)
        if reachable != self.reachable:
            log.info("kafka reachability changed", reachable=reachable, error=error or None)
        self.reachable, self.last_error = reachable, error
        KAFKA_REACHABLE.set(float(reachable))
        return reachable

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.probe_once()
            self._stop.wait(max(0.0, self._interval_s - (time.monotonic() - started)))
