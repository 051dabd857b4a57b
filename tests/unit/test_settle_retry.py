"""Which receipts of a settle call the client sends again, and when (`kpd_client.retry`)."""

from __future__ import annotations

import time

from kpd_client.retry import DEFAULT_RETRY_AFTER_S, unsettled


def unavailable(code: str, retry_after_ms: int | None = None) -> dict:
    result = {"receipt": "r", "status": "unavailable", "code": code}
    return result if retry_after_ms is None else {**result, "retry_after_ms": retry_after_ms}


def test_the_receipts_of_a_moving_shard_are_sent_again_after_the_longest_wait() -> None:
    results = [
        {"receipt": "a", "status": "acked"},
        unavailable("leader_starting", 1000),
        {"receipt": "c", "status": "invalid"},
        unavailable("not_leader", 2500),
    ]
    again = unsettled(results, time.monotonic() + 15)
    assert again is not None
    places, wait_s = again
    assert places.at == [1, 3] and wait_s == 2.5
    assert places.of(["a", "b", "c", "d"]) == ["b", "d"]
    places.fill(results, [{"receipt": "b", "status": "acked"}, {"receipt": "d", "status": "ok"}])
    assert [r["status"] for r in results] == ["acked", "acked", "invalid", "ok"]


def test_no_retry_for_settled_receipts_other_codes_or_past_the_deadline() -> None:
    assert unsettled([{"receipt": "a", "status": "already_acked"}], time.monotonic() + 15) is None
    assert unsettled([unavailable("leader_busy", 1000)], time.monotonic() + 15) is None
    assert unsettled([unavailable("no_leader", 1000)], time.monotonic() + 0.5) is None


def test_a_missing_retry_after_waits_the_default() -> None:
    again = unsettled([unavailable("no_leader")], time.monotonic() + 15)
    assert again is not None and again[1] == DEFAULT_RETRY_AFTER_S
