"""Whether this worker's clock lets it lead (docs/principles.md, 3: never early, by the broker's
clock as well as the sidecar's): measured (`foundation.broker_clock`), and within
`KPD_MAX_CLOCK_OFFSET_MS` of the broker's either way. Until it fits, the conductor pauses the
worker's membership of the group (`Membership.paused`): it leads nothing, and /readyz says why.
"""

from __future__ import annotations

from cluster.membership import Membership
from foundation.broker_clock import BrokerClock


class ClockGate:
    def __init__(self, max_offset_ms: int) -> None:
        self._max_offset_ms = max_offset_ms
        # Given once the worker joins the group (`watch`): it leads nothing before.
        self._clock: BrokerClock | None = None
        self._membership: Membership | None = None

    def watch(self, clock: BrokerClock, membership: Membership) -> None:
        """Gate `membership` by `clock`: each sample wakes the conductor if the fit changes."""
        self._clock, self._membership = clock, membership
        clock.on_sample = self._sampled

    def fit(self) -> bool:
        """Measured, and close enough to the broker's to lead (it waits the offset out)."""
        clock = self._clock
        return clock is not None and clock.measured and abs(clock.offset_ms) <= self._max_offset_ms

    def reasons(self) -> list[str]:
        """Why the clock keeps this worker from leading, for /readyz (none until measured)."""
        clock = self._clock
        if clock is None or not clock.measured or self.fit():
            return []
        return [
            f"clock {clock.offset_ms} ms off the broker's (bound {self._max_offset_ms} ms): "
            "leading nothing"
        ]

    def _sampled(self) -> None:
        """A new sample of the broker's clock: wake the conductor if the fit changes."""
        membership = self._membership
        if membership is not None and membership.paused == self.fit():
            membership.changed.set()
