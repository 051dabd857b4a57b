"""Early takeover of a dead sidecar's shards, before the group notices (bounded failover).

The group coordinator reassigns a crashed member's shards only after its session timeout (6 s at
least on a stock broker). Meanwhile each member is watched by one other, on another sidecar
where there is one (`sidecar.ring.guardian`). The watcher probes it 4 times a second (a TCP
connect, or a health call) and starts its shards itself once it takes it for gone (`Silence`).
Their roles' `init_transactions` fence the watched member's transactional ids, so a paused member
that wakes up can never write again: never two writers, never a duplicate. Once the group has
reassigned the shards (to this member or another, which then fences it in turn), or the member
answers again, the early takeover ends and the group's word holds (the delay roles hand over:
they deliver until the shards' new owner fences them, `sidecar.conductor`).

Taking over a live member is not free: each of its roles is fenced and restarts, then fences the
taker in turn. With each worker capped at a quarter of a core, a worker busy with a burst missed
its probes for a second every few seconds; its successor took its shards, gave them back, took
them again, and the burst drained at 0.67x one worker's rate (BENCHMARKS.md, 2026-11-27 20:52).
So refused connections, which say that nothing listens (killed, crashed, restarting), count at
once, while mere silence (paused, cut off, or starved of CPU) must last longer, and longer again
each time the member turned out to be alive.
"""

from __future__ import annotations

import enum
import socket
import time
from dataclasses import dataclass, field

import httpx
import structlog

from foundation.metrics import EARLY_TAKEOVER_FALSE_ALARMS, EARLY_TAKEOVERS
from foundation.periodic import PeriodicThread
from sidecar.owners import Owners

log = structlog.get_logger(__name__)

PROBE_EVERY_S = 0.25
PROBE_TIMEOUT_S = 0.5
# A health call costs both sides an HTTP request (about 0.0065 of a core each for 4 a second).
# A TCP connect sees a refused port as well, so a healthy member gets one health call a second
# and connects in between; once a call goes unanswered, every probe is a call again.
HEALTH_EVERY_S = 1.0
REFUSED_IN_A_ROW = 3  # connections refused for about a second: nothing listens there
SILENT_S = 3.0  # no answer this long: gone, or too slow to own shards (within the 6 s session)
SILENT_MAX_S = 48.0  # the most silence allowed a member that turned out alive again and again


class Probe(enum.Enum):
    ANSWERED = "answered"
    LISTENING = "listening"  # a TCP connect was accepted: no news of its health
    REFUSED = "refused"  # nothing listens at the address
    SILENT = "silent"  # timed out, or answered other than healthy


class Silence:
    """What one watched member's recent probes say: is it gone?

    Gone after `REFUSED_IN_A_ROW` refused connections in a row, or after `allowed_s` without an
    answer. An accepted connect says nothing of health: it only breaks a run of refusals. A
    member taken for gone on silence that answers again was alive: a false alarm, and the
    silence it is allowed doubles, up to `SILENT_MAX_S`."""

    def __init__(self) -> None:
        self.allowed_s = SILENT_S
        self.gone: Probe | None = None  # why it was taken for gone: REFUSED or SILENT
        self._refused = 0
        self._silent_since: float | None = None

    @property
    def silent(self) -> bool:
        """Has a probe gone unanswered since the last answer?"""
        return self._silent_since is not None

    def heard(self, probe: Probe, now: float) -> bool:
        """Record a probe's outcome at `now`; True for a false alarm."""
        if probe is Probe.ANSWERED:
            false_alarm = self.gone is Probe.SILENT
            if false_alarm:
                self.allowed_s = min(2 * self.allowed_s, SILENT_MAX_S)
            self.gone, self._refused, self._silent_since = None, 0, None
            return false_alarm
        self._refused = self._refused + 1 if probe is Probe.REFUSED else 0
        if self._silent_since is None and probe is not Probe.LISTENING:
            self._silent_since = now
        since = self._silent_since
        if self.gone is None and self._refused >= REFUSED_IN_A_ROW:
            self.gone = Probe.REFUSED
        elif self.gone is None and since is not None and now - since >= self.allowed_s:
            self.gone = Probe.SILENT
        return False


@dataclass
class Watch:
    """One watched member: what its probes say, and when it last had a health call."""

    silence: Silence = field(default_factory=Silence)
    health_at: float = 0.0


class Successor(PeriodicThread):
    def __init__(self, owners: Owners, url: str) -> None:
        super().__init__("successor", PROBE_EVERY_S)
        self._owners, self._url = owners, url
        self.shards: frozenset[int] = frozenset()  # taken over early, not (yet) assigned here
        self._watches: dict[str, Watch] = {}  # of each watched member, by address
        self._http = httpx.Client(timeout=PROBE_TIMEOUT_S)

    def stop(self) -> None:
        super().stop()
        self._http.close()

    def tick(self) -> None:
        # The members watched now, with the shards the group gives them; a member newly watched
        # starts with a clean record.
        watched = {m.url: m.shards for m in self._owners.ring.watched(self._url) if m.shards}
        self._watches = {url: self._watches.get(url) or Watch() for url in watched}
        taken: frozenset[int] = frozenset()
        for url, shards in watched.items():
            gone = self._gone(url, self._watches[url])
            if gone is None:
                continue
            if not shards <= self.shards:
                EARLY_TAKEOVERS.labels(cause=gone.value).inc()
                log.warning("taking over a silent sidecar's shards", sidecar=url,
                            shards=sorted(shards), cause=gone.value)  # fmt: skip
            taken |= shards
        self.shards = taken

    def _gone(self, url: str, watch: Watch) -> Probe | None:
        """Probe the member at `url`: why it is taken for gone, if it is."""
        silence = watch.silence
        if silence.heard(self._probe(url, watch), time.monotonic()):
            EARLY_TAKEOVER_FALSE_ALARMS.inc()
            log.warning(
                "the sidecar taken over on silence answers again: it was alive; it may be "
                "silent longer before the next takeover",
                sidecar=url,
                allowed_s=silence.allowed_s,
            )
        return silence.gone

    def _probe(self, url: str, watch: Watch) -> Probe:
        now = time.monotonic()
        silence = watch.silence
        if silence.silent or silence.gone is not None or now - watch.health_at >= HEALTH_EVERY_S:
            watch.health_at = now
            return health_probe(self._http, url)
        return tcp_probe(url)


def health_probe(http: httpx.Client, url: str) -> Probe:
    try:
        answer = http.get(f"{url}/healthz")
    except httpx.ConnectError:  # refused (a connect that times out is a ConnectTimeout: silent)
        return Probe.REFUSED
    except httpx.HTTPError:
        return Probe.SILENT
    return Probe.ANSWERED if answer.status_code == 200 else Probe.SILENT


def tcp_probe(url: str) -> Probe:
    address = httpx.URL(url)
    try:
        socket.create_connection((address.host, address.port or 80), PROBE_TIMEOUT_S).close()
    except TimeoutError:
        return Probe.SILENT
    except OSError:  # refused, or no route: as httpx's ConnectError
        return Probe.REFUSED
    return Probe.LISTENING
