"""Early takeover of a dead sidecar's shards, before the group notices (bounded failover).

The group coordinator reassigns a crashed member's shards only after its session timeout (6 s at
least on a stock broker). Meanwhile each member watches one other: its predecessor in the ring of
members (ordered by member id). It probes the predecessor's HTTP health a few times a second;
when the probes fail `FAILURES` times in a row it starts the predecessor's shards itself. Their
roles' `init_transactions` fence the predecessor's transactional ids, so a paused predecessor
that wakes up can never write again: never two writers, never a duplicate. Once the group has
reassigned the shards (to this member or another, which then fences it in turn), or the
predecessor answers again, the early takeover ends and the group's word holds (the delay roles
hand over: they deliver until the shards' new owner fences them, `sidecar.conductor`).
"""

from __future__ import annotations

import httpx
import structlog

from foundation.periodic import PeriodicThread
from sidecar.owners import Owners

log = structlog.get_logger(__name__)

PROBE_EVERY_S = 0.25
PROBE_TIMEOUT_S = 0.5
FAILURES = 3  # about a second of silence


class Successor(PeriodicThread):
    def __init__(self, owners: Owners, url: str) -> None:
        super().__init__("successor", PROBE_EVERY_S)
        self._owners, self._url = owners, url
        self.shards: frozenset[int] = frozenset()  # taken over early, not (yet) assigned here
        self._failures: dict[str, int] = {}
        self._http = httpx.Client(timeout=PROBE_TIMEOUT_S)

    def stop(self) -> None:
        super().stop()
        self._http.close()

    def tick(self) -> None:
        watched = self._predecessor()
        if watched is None:
            self.shards = frozenset()
            return
        url, shards = watched
        failures = 0 if _answers(self._http, url) else self._failures.get(url, 0) + 1
        self._failures = {url: failures}
        taken = shards if failures >= FAILURES else frozenset()
        if taken and taken != self.shards:
            log.warning("taking over a silent sidecar's shards", sidecar=url, shards=sorted(taken))
        self.shards = taken

    def _predecessor(self) -> tuple[str, frozenset[int]] | None:
        """The member this one watches, with the shards the group gives it."""
        watched = self._owners.predecessor(self._url)
        return (watched.url, watched.shards) if watched is not None and watched.shards else None


def _answers(http: httpx.Client, url: str) -> bool:
    try:
        return http.get(f"{url}/healthz").status_code == 200
    except httpx.HTTPError:
        return False
