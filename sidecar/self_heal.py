"""Self-healing after a broker outage: a worker whose own Kafka clients stay broken restarts.

After a broker stall, long-lived librdkafka clients have been seen looping on `Local: Unknown
partition` for minutes while fresh clients read the broker fine. So when this node stays unready
for a reason its long-lived clients give (Kafka unreachable to the probe, no leader known to the
group, the worker left out of the group, topics not set up) for `heal_after_s` while a fresh
client reaches the cluster, the worker exits and its supervisor (`sidecar.workers`) starts a
fresh one. When Kafka is really away, fresh clients fail too and nothing restarts: readiness
says why meanwhile. A worker whose loops stall for good (the watchdog) exits the same way
(`exit_for_restart`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn

import structlog
from confluent_kafka.admin import AdminClient

from cluster.membership import Membership
from foundation.periodic import PeriodicThread

log = structlog.get_logger(__name__)

# The /readyz reasons that come from the process's long-lived Kafka clients.
CLIENT_REASONS = (
    "kafka unreachable",
    "shard leaders not known",
    "not in the group",
    "kpd topics not created",
)
CHECK_EVERY_S = 1.0
EXIT_STALLED = 75  # EX_TEMPFAIL: the worker supervisor (or compose) starts a fresh process


class SelfHeal(PeriodicThread):
    def __init__(
        self,
        client_config: dict[str, Any],
        reasons: Callable[[], list[str]],
        heal_after_s: float,
        on_wedged: Callable[[str], None],
    ) -> None:
        super().__init__("self-heal", CHECK_EVERY_S)
        self._config = client_config
        self._reasons, self._heal_after_s, self._on_wedged = reasons, heal_after_s, on_wedged
        self._since: float | None = None  # when client-side trouble began, while fresh ones work

    def tick(self) -> None:
        trouble = [r for r in self._reasons() if r.startswith(CLIENT_REASONS)]
        if not trouble or not self._fresh_client_reaches_kafka():
            self._since = None
            return
        self._since = self._since or time.monotonic()
        if time.monotonic() - self._since >= self._heal_after_s:
            self.stop()  # once: the worker is on its way out
            self._on_wedged("; ".join(trouble))

    def _fresh_client_reaches_kafka(self) -> bool:
        try:
            metadata = AdminClient(self._config).list_topics(timeout=2)
        except Exception:  # any failure means "not reachable now", like the probe
            return False
        return bool(metadata.brokers)


def exit_for_restart(why: str, membership: Membership | None) -> NoReturn:
    """Stuck for good (a stalled loop, broken clients): hand the shards over at once, then
    exit; the worker supervisor starts a fresh process."""
    if membership is not None:
        leave = threading.Thread(target=membership.stop, name="leave", daemon=True)
        leave.start()
        leave.join(timeout=2)  # the group's client may be stuck too: bounded
    log.error("exiting so a fresh process takes over", why=why, code=EXIT_STALLED)
    os._exit(EXIT_STALLED)
