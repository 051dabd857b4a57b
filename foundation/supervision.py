"""Supervised loops (docs/principles.md, 7: no silent stall).

Every loop that must make progress owns a `LoopHealth` and calls `beat()` at least once per step
(long operations inside a step beat as they go). A `Supervisor` runs one role (the delay or pop
leader of a shard) in its own thread and restarts it after a failure, with a backoff, counting
the restart in `kpd_leader_restarts_total{role,shard,reason}`. `foundation.watchdog` notices a
loop that has gone quiet.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol, runtime_checkable

import structlog
from confluent_kafka import KafkaException

from foundation.metrics import LEADER_RESTARTS

log = structlog.get_logger(__name__)

# A role that fails more often than this is "crash-looping" and says so on /readyz.
CRASH_LOOP_RESTARTS = 3
CRASH_LOOP_WINDOW_S = 60.0
BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0)
HEALTHY_AFTER_S = 30.0  # a role that ran this long without failing starts its backoff afresh


class StopRequested(Exception):
    """A loop's long start gave up because its supervisor is stopping it (or released it before
    it had taken anything over)."""


class Located(Protocol):
    """A Kafka record's place (a confluent-kafka `Message` is one)."""

    def topic(self) -> str | None: ...

    def partition(self) -> int | None: ...

    def offset(self) -> int | None: ...


class LoopHealth:
    """Liveness of one loop: when it last made progress, and what record it was handling."""

    def __init__(self, role: str, shard: int) -> None:
        self.role, self.shard = role, shard
        self.last_beat = time.monotonic()
        # The record in hand, for logs: set by a loop per record (an attribute, not a method: a
        # call per record costs), spelled out only when a log names it (`record`).
        self.current: Located | None = None
        self.running = False  # beats are expected only while the loop runs
        self.restarts: deque[float] = deque(maxlen=CRASH_LOOP_RESTARTS + 1)
        self.last_failure: str | None = None
        self.thread_id: int | None = None  # the thread running the loop, for a stack when stalled
        self.stop_requested = False  # set by the supervisor's stop (`beat_unless_stopping`)
        self.released = False  # set by the supervisor's release: the shard is another's now
        self.in_fence = False  # inside `fencing`: an init_transactions may still fence others
        self.idle = False  # inside `waiting`: blocked for input, which is no stall

    @property
    def name(self) -> str:
        return f"{self.role}[{self.shard}]"

    def beat(self) -> None:
        self.last_beat = time.monotonic()

    def beat_unless_stopping(self) -> None:
        """A beat for long starts (catching up on a state topic): once the supervisor is asked
        to stop, raise instead, so the caller (who waits for the stop) is not held up to the
        end of the reading."""
        self.beat()
        if self.stop_requested:
            raise StopRequested(self.name)

    @contextmanager
    def fencing(self) -> Iterator[None]:
        """Around each `init_transactions` of the loop's role, which fences whoever used its
        transactional id before. A role asked to stop or released (its shard is another
        member's now) must not begin one: it would fence the shard's next owner, whose roles
        then fail at their first commit and restart (a pop role stopped while starting did so).
        One already sent cannot be called back: `in_fence`
        shows it, and the group's revoke waits it out (`Conductor.await_released`). Marked
        before the check, so a waiter that sees neither the mark nor the call has missed none."""
        self.in_fence = True
        try:
            if self.stop_requested or self.released:
                raise StopRequested(self.name)
            yield
        finally:
            self.in_fence = False

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """Around a wait for input with no bound (a role whose next deadline is far off): the
        watchdog counts no quiet time meanwhile, and the loop beats when it wakes."""
        self.idle = True
        try:
            yield
        finally:
            self.idle = False
            self.beat()

    @property
    def record(self) -> str | None:
        """The record in hand as "topic/partition@offset", if any."""
        if self.current is None:
            return None
        current = self.current
        return f"{current.topic()}/{current.partition()}@{current.offset()}"

    def quiet_s(self, now: float) -> float:
        return now - self.last_beat if self.running and not self.idle else 0.0

    def stack(self) -> str:
        """Where the loop's thread is now: the call a stalled loop is stuck in."""
        frame = sys._current_frames().get(self.thread_id or -1)
        return "".join(traceback.format_stack(frame)[-8:]) if frame is not None else "(not running)"

    def crash_looping(self, now: float) -> bool:
        recent = [t for t in self.restarts if now - t < CRASH_LOOP_WINDOW_S]
        return len(recent) > CRASH_LOOP_RESTARTS


class Role(Protocol):
    """A leader role: `start` fences and catches up, `step` does a bounded amount of work."""

    def start(self) -> None: ...

    def step(self) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class Wakes(Protocol):
    """A role whose wait between steps has no bound: its stop must end that wait."""

    def wake(self) -> None: ...


@runtime_checkable
class HandsOver(Protocol):
    """A role that can go on after its shard moved to another member, until that member fences
    it (`Supervisor.release`)."""

    def hand_over(self) -> None:
        """From now on, find out soon that the new owner fenced this role, even while idle."""


NO_FAILURE = "none"  # the reason label of the series every supervised loop starts with


def failure_reason(error: BaseException) -> str:
    """A short, bounded label for the metric: the Kafka error name, else the exception type."""
    if isinstance(error, KafkaException) and error.args:
        name = getattr(error.args[0], "name", None)
        if callable(name):
            return str(name()).lstrip("_").lower()
    return type(error).__name__


class Supervisor:
    """Runs `make(health)`'s role in a thread until `stop()`; restarts it after any failure,
    unless released."""

    def __init__(
        self,
        health: LoopHealth,
        make: Callable[[LoopHealth], Role],
        on_change: Callable[[], None] = lambda: None,  # the role started, or the thread ended
    ) -> None:
        self.health = health
        self._make, self._on_change = make, on_change
        # A series at 0 from the start: a dashboard shows no restarts as 0, not "No data", and
        # with several workers (multiprocess mode) a family is exported only once it has one.
        LEADER_RESTARTS.labels(health.role, str(health.shard), NO_FAILURE)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=health.name, daemon=True)
        self.role: Role | None = None  # the running instance, once started
        self._starting: Role | None = None  # the instance made, started or not

    def start(self) -> None:
        self._thread.start()

    def release(self) -> bool:
        """The shard is another member's now: let a role that can hand over go on until it fails
        (the new owner's fence), then end instead of restarting; False if the role cannot (not
        made yet, or not a `HandsOver`), for the caller to stop it. A role still starting is
        released too, and learns it at once: one that has fenced the shard's previous writer
        already finishes its start and delivers until fenced in turn; stopped instead, it would
        leave the shard with no writer until the group gave it back and another start fenced
        it."""
        role = self._starting
        if not isinstance(role, HandsOver):
            return False
        self.health.released = True
        role.hand_over()
        return True

    @property
    def ended(self) -> bool:
        return not self._thread.is_alive()

    def request_stop(self) -> None:
        """Ask the role to stop after its step (or its start's next beat), without waiting."""
        self.health.stop_requested = True
        self._stop.set()
        role = self._starting
        if isinstance(role, Wakes):
            role.wake()

    def stop(self, timeout_s: float) -> bool:
        """`request_stop`, then wait; False if the role did not end within `timeout_s`."""
        self.request_stop()
        self._thread.join(timeout=timeout_s)
        return not self._thread.is_alive()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def _run(self) -> None:
        try:
            self._supervise()
        finally:
            self._on_change()

    def _supervise(self) -> None:
        self.health.thread_id = threading.get_ident()
        attempt = 0
        while not self._stop.is_set():
            health = self.health
            health.running, health.current = True, None
            health.beat()
            started = time.monotonic()
            role: Role | None = None
            try:
                role = self._make(health)
                self._starting = role
                role.start()
                self.role = role
                self._on_change()
                while not self._stop.is_set():
                    health.beat()
                    role.step()
            except StopRequested:
                return
            except Exception as error:
                if self.health.released:
                    log.info(
                        "handed over", role=health.role, shard=health.shard,
                        reason=failure_reason(error),
                    )  # fmt: skip
                    return  # the new owner fenced it
                attempt = 0 if time.monotonic() - started > HEALTHY_AFTER_S else attempt
                self._failed(error)
                attempt += 1
            finally:
                self.role = self._starting = None
                if role is not None:
                    _close_quietly(role, health)
                health.running = False
            if not self._stop.is_set() and attempt:
                self._stop.wait(BACKOFF_S[min(attempt, len(BACKOFF_S)) - 1])

    def _failed(self, error: Exception) -> None:
        health = self.health
        reason = failure_reason(error)
        health.restarts.append(time.monotonic())
        health.last_failure = f"{reason}: {error}"[:500]
        LEADER_RESTARTS.labels(health.role, str(health.shard), reason).inc()
        log.exception(
            "role failed; restarting it", role=health.role, shard=health.shard,
            reason=reason, record=health.record,
        )  # fmt: skip


def _close_quietly(role: Role, health: LoopHealth) -> None:
    health.beat()  # closing is part of the loop: the watchdog sees it if it hangs
    try:
        role.close()
    except Exception:
        log.exception("closing a role failed", role=health.role, shard=health.shard)
