"""A new pop leader's inherited groups, made ready in parallel: one fetcher per group.

The ledgers a new leader replays name the groups that hold leases on its shard. It must fetch
each of them before any worker asks: it may settle their leases (expiry) and must then move the
group's offsets, or the replay floor could never pass their checkpoints. Making a group's
fetcher costs round trips to the broker: its retry and dead-letter topics checked, a new
consumer's first metadata, the group's committed offsets. That is about 0.1 s per group. Done
one group per step in the service thread, a takeover of 100 groups served its last group 11 s
after the kill. Here a few threads make them at once, and the
service thread installs each one when it is ready. From then on only the service thread
touches that fetcher.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

F = TypeVar("F")
Make = Callable[[str, set[str]], F]  # (group, its topics) -> its fetcher


class GroupResumer(Generic[F]):
    def __init__(self, threads: int, ready: Callable[[], None] = lambda: None) -> None:
        self._threads, self._ready = threads, ready  # `ready()`: a fetcher was made
        self._pool: ThreadPoolExecutor | None = None
        self._pending: dict[str, Future[F]] = {}

    def start(self, groups: dict[str, set[str]], make: Make[F]) -> None:
        if not groups:
            return
        self._pool = ThreadPoolExecutor(min(self._threads, len(groups)), "resume")
        self._pending = {
            group: self._pool.submit(make, group, topics) for group, topics in groups.items()
        }
        for future in self._pending.values():
            future.add_done_callback(lambda _: self._ready())

    def install_ready(self, install: Callable[[str, F], None]) -> bool:
        """Hand each fetcher made since the last call to `install`; any? A failure to make one
        is raised here, in the service thread, which its supervisor restarts (as for any Kafka
        call of its step); what is still pending then is closed by `close`."""
        ready = [group for group, future in self._pending.items() if future.done()]
        for group in ready:
            made = self._pending[group].result()
            del self._pending[group]
            install(group, made)
        self._stop_when_done()
        return bool(ready)

    def wait_for(self, group: str, timeout_s: float) -> F | None:
        """The fetcher of a group a worker asks for while it is still being made (None if the
        group was not inherited, or was already handed out)."""
        future = self._pending.get(group)
        if future is None:
            return None
        made = future.result(timeout=timeout_s)  # a timeout leaves it pending, for `close`
        del self._pending[group]
        self._stop_when_done()
        return made

    def close(self, discard: Callable[[F], None]) -> None:
        """Stop making fetchers; close the ones made but never installed."""
        for future in self._pending.values():
            future.cancel()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        for future in self._pending.values():  # a failed one closed what it had made
            if not future.cancelled() and future.exception() is None:
                discard(future.result())
        self._pending = {}

    def _stop_when_done(self) -> None:
        if not self._pending and self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
