"""Errors from kpd, and when to try a call or some of its receipts again.

While leadership moves, kpd answers 503 with a `Retry-After` header and one of the codes in
`RETRYABLE`; `retry_while_moving` is the stamina backoff hook that waits that long, as long as the
retry starts before the caller's deadline. A settle call whose receipts span shards answers
`unavailable` for the receipts of a shard whose leader moves, with the same codes and a
`retry_after_ms`; `unsettled` says which to send again, and when.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any


class KpdError(RuntimeError):
    """An error answer (RFC 9457 problem) from kpd; `code` is its stable machine code."""

    def __init__(
        self, status: int, problem: dict[str, Any], retry_after_s: float | None = None
    ) -> None:
        super().__init__(f"{status} {problem.get('code')}: {problem.get('detail')}")
        self.status = status
        self.code = str(problem.get("code"))
        self.problem = problem
        self.retry_after_s = retry_after_s  # from the Retry-After header, if any


# 503 answers that mean "leadership is moving": retried until the caller's deadline.
RETRYABLE = frozenset(
    {"leader_starting", "no_leader", "not_leader", "leader_unreachable", "cancel_pending"}
)
RETRY_DEADLINE_S = 15.0
DEFAULT_RETRY_AFTER_S = 0.5  # when a retryable answer names no Retry-After


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header: delta-seconds or an HTTP date (RFC 9110)."""
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # not an HTTP date (those are GMT); do not guess
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def retry_while_moving(deadline: float) -> Callable[[Exception], bool | float]:
    """A stamina backoff hook: retry the answers in RETRYABLE after their Retry-After, as long
    as the retry starts before `deadline` (a `time.monotonic()` value); give up otherwise."""

    def backoff(error: Exception) -> bool | float:
        if not (isinstance(error, KpdError) and error.status == 503 and error.code in RETRYABLE):
            return False
        wait = DEFAULT_RETRY_AFTER_S if error.retry_after_s is None else error.retry_after_s
        return wait if time.monotonic() + wait <= deadline else False

    return backoff


@dataclass(frozen=True)
class Places:
    """Where, in a settle call's results, the receipts sent again belong."""

    at: list[int]

    def of(self, receipts: Sequence[str]) -> list[str]:
        return [receipts[i] for i in self.at]

    def fill(self, results: list[dict[str, Any]], answered: Sequence[dict[str, Any]]) -> None:
        for i, result in zip(self.at, answered, strict=True):
            results[i] = result


def unsettled(results: Sequence[dict[str, Any]], deadline: float) -> tuple[Places, float] | None:
    """The receipts a moving shard left `unavailable` (with a code in RETRYABLE) and how long to
    wait before sending them again; None when there are none, or the wait would end past
    `deadline` (a `time.monotonic()` value): they then stay `unavailable` in the answer."""
    at = [
        i
        for i, result in enumerate(results)
        if result.get("status") == "unavailable" and result.get("code") in RETRYABLE
    ]
    if not at:
        return None
    waits_ms = [results[i].get("retry_after_ms") for i in at]
    wait_s = max(DEFAULT_RETRY_AFTER_S if ms is None else ms / 1000 for ms in waits_ms)
    return (Places(at), wait_s) if time.monotonic() + wait_s <= deadline else None
