"""Wake the calls that wait for this worker's schedule index to show something (a schedule just
written, a cancel settled) as soon as the index is written, rather than at their next poll.

The delay leaders and the standby write the index on their own threads (`foundation.store`) and
call `written`; a waiting call waits on an event of its own in the event loop. A schedule's POST
answers once the index shows it, and a poll every 5 ms added 2.5 ms to it on average.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager


class IndexWrites:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: set[asyncio.Event] = set()

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def written(self) -> None:
        """The index was written; callable from any thread, cheap when no call waits."""
        if self._loop is not None and self._waiters:
            self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        for event in self._waiters:
            event.set()

    @contextmanager
    def waiting(self) -> Iterator[asyncio.Event]:
        """An event set at each index write while the caller waits (the caller clears it)."""
        event = asyncio.Event()
        self._waiters.add(event)
        try:
            yield event
        finally:
            self._waiters.discard(event)
