"""A bound around a librdkafka call that may ignore its own timeout.

`send_offsets_to_transaction` waits on a coordinator request whose timeout librdkafka never checks
(librdkafka #5456, #5511): when the coordinator goes away with the request in flight, the call
returns only when some other broker event wakes it, seen here 30 s after a broker restart while
its timeout was 10 s. Such a call runs in a helper thread; past the bound the caller gets a
`_TIMED_OUT` KafkaException at once, and its role restarts with a new transactional producer,
which fences the stuck one. The helper is free again whenever librdkafka lets it.

Helpers are kept and reused: the pop services make this call in most steps, and starting a thread
for each took ~4% of a pop thread's time (py-spy under bench/pop.py). A stuck helper is
simply not idle, so the next call gets a fresh one.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException

T = TypeVar("T")
GRACE_S = 1.0  # librdkafka's own timeout, when it works, answers first


class _Helpers:
    """Daemon threads that run bounded calls, reused once their call returns."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._idle = 0  # helpers back from their last call (about to wait, or waiting, for one)
        self._lock = threading.Lock()

    def run(self, job: Callable[[], None]) -> None:
        with self._lock:
            if self._idle:
                self._idle -= 1
            else:
                threading.Thread(target=self._serve, name="bounded call", daemon=True).start()
        self._jobs.put(job)

    def _serve(self) -> None:
        while True:
            self._jobs.get()()
            with self._lock:
                self._idle += 1


_helpers = _Helpers()


def call_within(timeout_s: float, what: str, call: Callable[..., T], *args: Any) -> T:
    """`call(*args)`, or a `_TIMED_OUT` KafkaException if it has not returned within the bound."""
    done = threading.Event()
    outcome: list[Any] = []

    def run() -> None:
        threading.current_thread().name = f"bounded {what}"  # names a stuck one in stack dumps
        try:
            outcome.append((True, call(*args)))
        except BaseException as error:  # handed to the caller's thread
            outcome.append((False, error))
        finally:
            done.set()

    _helpers.run(run)
    if not done.wait(timeout_s + GRACE_S):
        raise KafkaException(
            KafkaError(KafkaError._TIMED_OUT, f"{what} still waiting after {timeout_s:.1f} s")
        )
    succeeded, value = outcome[0]
    if not succeeded:
        raise value
    return value  # type: ignore[no-any-return]
