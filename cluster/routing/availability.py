"""Wake long polls as soon as records arrive for a (group, topic) (RocketMQ long polling).

The pop services fetch on their own threads and call `notify`; a parked pop (or a peer's watch)
waits on an event of its own for its (group, topic) in the event loop. An arrival wakes one
parked pop, the longest parked, not all of them: each woken pop asks every shard, and with
several clients parked all but one found nothing. A woken pop that may leave records behind (it
filled its batch, or it leaves without having looked) passes the turn on (`pass_on`). Every
peer's watch wakes on every arrival: it only counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from typing import Any

from revive import metrics

Key = tuple[str, str]  # (group, topic)


async def until(waiting: Awaitable[Any], timeout_s: float) -> None:
    """Wait for `waiting` (an event's wait) at most `timeout_s`; a timeout is no error."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(waiting, timeout_s)


class Availability:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        # Per key, in the order they parked: each waiter's event, and whether every arrival
        # wakes it (a peer's watch) or only its turn (a pop).
        self._waiters: dict[Key, dict[asyncio.Event, bool]] = {}
        # Set whenever a poll parks: the arrival watch sleeps on it while no poll waits.
        self.parked = threading.Event()

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def notify(self, group: str, topic: str) -> None:
        """Records arrived for pops of (group, topic); callable from any thread."""
        if self._loop is not None and (group, topic) in self._waiters:
            self._loop.call_soon_threadsafe(self._wake, (group, topic))

    def awaited(self) -> bool:
        """Does any long poll wait for records now? (read from the pop services' threads)"""
        return bool(self._waiters)

    def awaited_keys(self) -> tuple[Key, ...]:
        """The (group, topic)s long polls wait for now (read from another thread: one C-level
        copy under the GIL)."""
        return tuple(self._waiters)

    def pass_on(self, group: str, topic: str) -> None:
        """A woken pop may have left records: wake the next parked one (on the event loop)."""
        self._wake((group, topic))

    def _wake(self, key: Key) -> None:
        turn_given = False
        for event, every in self._waiters.get(key, {}).items():
            if every:
                event.set()
            elif not (turn_given or event.is_set()):
                event.set()
                turn_given = True

    @contextmanager
    def waiting(self, group: str, topic: str, every: bool = False) -> Iterator[asyncio.Event]:
        """An event set when records arrive for (group, topic) while the caller waits: on its
        turn among the parked pops, or on `every` arrival."""
        key, event = (group, topic), asyncio.Event()
        self._waiters.setdefault(key, {})[event] = every
        self.parked.set()
        metrics.PARKED.inc()
        try:
            yield event
        except BaseException:
            if event.is_set() and not every:  # woken, and leaving without a look
                self._wake(key)
            raise
        finally:
            metrics.PARKED.dec()
            self._waiters[key].pop(event, None)
            if not self._waiters[key]:
                del self._waiters[key]
