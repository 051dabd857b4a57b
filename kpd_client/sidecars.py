"""Which sidecar a call goes to: each in turn, those found away last.

Any sidecar answers any call, so a client given several spreads its calls over them (RocketMQ 5
clients pop every broker in turn). A sidecar found away is asked last for `AWAY_S`: one that
could not be reached (refused, or no connect within the connect timeout), or that took a call and
gave no answer (a paused process, a frozen VM, a host cut off behind an open connection, which
otherwise cost every call that came to it the whole call timeout). Once `AWAY_S` has passed it
takes its turns again, so a sidecar that comes back is soon asked again.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence

AWAY_S = 10.0


class Sidecars:
    """The sidecars a client knows; safe to share between threads."""

    def __init__(self, urls: Sequence[str], clock: Callable[[], float] = time.monotonic) -> None:
        self._urls = [url.rstrip("/") for url in urls]
        if not self._urls:
            raise ValueError("give at least one sidecar URL")
        self._clock = clock
        self._turn = itertools.count()
        self._away: dict[str, float] = {}  # url -> when it was last found away

    def in_turn(self) -> list[str]:
        """The sidecars, starting with the next one in turn; those found away within `AWAY_S`
        last, so a call meets one only when all the others failed it too."""
        start = next(self._turn) % len(self._urls)
        urls = self._urls[start:] + self._urls[:start]
        now, away = self._clock(), self._away.copy()  # a copy: other threads may mark one
        gone = {url for url, at in away.items() if now - at < AWAY_S}
        return [url for url in urls if url not in gone] + [url for url in urls if url in gone]

    def away(self, url: str) -> None:
        """The sidecar at `url` failed a call without an answer."""
        self._away[url] = self._clock()
