"""Early takeover of a dead sidecar's shards, before the group notices (bounded failover).

The group coordinator reassigns a crashed member's shards only after its session timeout (6 s at
least on a stock broker). Meanwhile each member is watched by one other, on another sidecar
where there is one (`cluster.ring.guardian`). The watcher holds a TCP connection open to it,
which the kernel closes the moment its process dies (`cluster.links`), and asks its health once
a second, for a member paused or cut off; it starts the member's shards itself once it takes
it for gone (`Silence`). While a member is in doubt (its link closed, a probe refused or not
answered) it is probed 4 times a second.
Their roles' `init_transactions` fence the watched member's transactional ids, so a paused member
that wakes up can never write again: never two writers, never a duplicate. Once the group has
reassigned the shards (to this member or another, which then fences it in turn), or the member
answers again, the early takeover ends and the group's word holds (the delay roles hand over:
they deliver until the shards' new owner fences them, `cluster.conductor`).

Taking over a live member is not free: each of its roles is fenced and restarts, then fences the
taker in turn. With each worker capped at a quarter of a core, a worker busy with a burst missed
its probes for a second every few seconds; its successor took its shards, gave them back, took
them again, and the burst drained at 0.67x one worker's rate.
So refused connections, which say that nothing listens (killed, crashed, restarting), count at
once, while mere silence (paused, cut off, or starved of CPU) must last longer, and longer again
each time the member turned out to be alive.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from cluster.links import Links, Probe
from cluster.owners import Owners
from foundation.metrics import EARLY_TAKEOVER_FALSE_ALARMS, EARLY_TAKEOVERS
from foundation.periodic import PeriodicThread

log = structlog.get_logger(__name__)

PROBE_EVERY_S = 0.25  # while a member is in doubt
PROBE_TIMEOUT_S = 0.5
# A health call costs both sides an HTTP request; a healthy member gets one a second, and its
# link tells of a death in between. Once a call goes unanswered, every probe is a call again.
HEALTH_EVERY_S = 1.0
REFUSED_IN_A_ROW = 3  # connections refused for about a second: nothing listens there
SILENT_S = 3.0  # no answer this long: gone, or too slow to own shards (within the 6 s session)
SILENT_MAX_S = 48.0  # the most silence allowed a member that turned out alive again and again


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

    @property
    def in_doubt(self) -> bool:
        """Is the member taken for gone, or is it silent or refusing now?"""
        return self.gone is not None or self.silent or self._refused > 0

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
        super().__init__("successor", HEALTH_EVERY_S)
        self._owners, self._url = owners, url
        self.shards: frozenset[int] = frozenset()  # taken over early, not (yet) assigned here
        self._watches: dict[str, Watch] = {}  # of each watched member, by address
        self._links = Links(PROBE_TIMEOUT_S)
        self._closed: set[str] = set()  # members whose link closed during the last rest
        self.on_change: Callable[[], None] = lambda: None  # the shards taken over changed

    def stop(self) -> None:
        self._links.wake()
        super().stop()
        self._links.close()

    def rest(self, seconds: float) -> None:
        """Until the next round, or at once when a member's link closes; a member in doubt is
        probed every PROBE_EVERY_S."""
        doubtful = any(watch.silence.in_doubt for watch in self._watches.values())
        self._closed = self._links.wait(min(seconds, PROBE_EVERY_S) if doubtful else seconds)

    def tick(self) -> None:
        # The members watched now, with the shards the group gives them; a member newly watched
        # starts with a clean record.
        watched = {m.url: m.shards for m in self._owners.ring.watched(self._url) if m.shards}
        self._watches = {url: self._watches.get(url) or Watch() for url in watched}
        self._links.keep(watched.keys())
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
        if taken != self.shards:
            self.shards = taken
            self.on_change()

    def _gone(self, url: str, watch: Watch) -> Probe | None:
        """Probe the member at `url`: why it is taken for gone, if it is."""
        silence = watch.silence
        probe = self._probe(url, watch)
        if probe is not None and silence.heard(probe, time.monotonic()):
            EARLY_TAKEOVER_FALSE_ALARMS.inc()
            log.warning(
                "the sidecar taken over on silence answers again: it was alive; it may be "
                "silent longer before the next takeover",
                sidecar=url,
                allowed_s=silence.allowed_s,
            )
        return silence.gone

    def _probe(self, url: str, watch: Watch) -> Probe | None:
        """A health call once a second or while in doubt; a connect where the link closed or
        is missing; None where the link is open and nothing is due (no news)."""
        now = time.monotonic()
        silence = watch.silence
        if silence.silent or silence.gone is not None or now - watch.health_at >= HEALTH_EVERY_S:
            watch.health_at = now
            return self._links.health(url)
        if url in self._closed or not self._links.holds(url) or silence.in_doubt:
            return self._links.connect(url)
        return None
