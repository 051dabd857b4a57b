"""Self-healing after a broker outage: a worker whose own Kafka clients stay broken restarts.

After a broker stall, long-lived librdkafka clients have been seen looping on `Local: Unknown
partition` for minutes while fresh clients read the broker fine. So when this node stays unready
for a reason its long-lived clients give (Kafka unreachable to the probe, no leader known to the
group, topics not set up) for `heal_after_s` while a fresh client reaches the cluster, the
worker exits and its supervisor (`sidecar.workers`) starts a fresh one. When Kafka is really
away, fresh clients fail too and nothing restarts: readiness says why meanwhile.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import structlog
from confluent_kafka.admin import AdminClient

log = structlog.get_logger(__name__)

# The /readyz reasons that come from the process's long-lived Kafka clients.
CLIENT_REASONS = ("kafka unreachable", "shard leaders not known", "kpd topics not created")
CHECK_EVERY_S = 1.0


class SelfHeal:
    def __init__(
        self,
        client_config: dict[str, Any],
        reasons: Callable[[], list[str]],
        heal_after_s: float,
        on_wedged: Callable[[str], None],
    ) -> None:
        self._config = client_config
        self._reasons, self._heal_after_s, self._on_wedged = reasons, heal_after_s, on_wedged
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="self-heal", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        since: float | None = None  # when the client-side trouble started, while fresh ones work
        while not self._stop.wait(CHECK_EVERY_S):
            trouble = [r for r in self._reasons() if r.startswith(CLIENT_REASONS)]
            if not trouble or not self._fresh_client_reaches_kafka():
                since = None
                continue
            since = since or time.monotonic()
            if time.monotonic() - since >= self._heal_after_s:
                self._on_wedged("; ".join(trouble))
                return

    def _fresh_client_reaches_kafka(self) -> bool:
        try:
            metadata = AdminClient(self._config).list_topics(timeout=2)
        except Exception:  # any failure means "not reachable now", like the probe
            return False
        return bool(metadata.brokers)
