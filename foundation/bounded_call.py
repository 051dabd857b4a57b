"""A bound around a librdkafka call that may ignore its own timeout.

`send_offsets_to_transaction` waits on a coordinator request whose timeout librdkafka never checks
(librdkafka #5456, #5511): when the coordinator goes away with the request in flight, the call
returns only when some other broker event wakes it, seen here 30 s after a broker restart while
its timeout was 10 s. Such a call runs in a helper thread; past the bound the caller gets a
`_TIMED_OUT` KafkaException at once, and its role restarts with a new transactional producer,
which fences the stuck one. The helper ends whenever librdkafka lets it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException

T = TypeVar("T")
GRACE_S = 1.0  # librdkafka's own timeout, when it works, answers first


def call_within(timeout_s: float, what: str, call: Callable[..., T], *args: Any) -> T:
    """`call(*args)`, or a `_TIMED_OUT` KafkaException if it has not returned within the bound."""
    done = threading.Event()
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, call(*args)))
        except BaseException as error:  # handed to the caller's thread
            outcome.append((False, error))
        finally:
            done.set()

    threading.Thread(target=run, name=f"bounded {what}", daemon=True).start()
    if not done.wait(timeout_s + GRACE_S):
        raise KafkaException(
            KafkaError(KafkaError._TIMED_OUT, f"{what} still waiting after {timeout_s:.1f} s")
        )
    succeeded, value = outcome[0]
    if not succeeded:
        raise value
    return value  # type: ignore[no-any-return]
