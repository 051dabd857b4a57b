"""The Python client waits out a leadership move (503 + Retry-After) within its deadline, and
gives up after it, against real sidecars."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest
import stamina

from kpd_client import AsyncKpdClient, KpdClient, KpdError
from kpd_client.retry import RETRYABLE


@pytest.fixture
def retries():
    """Every retry the client schedules, as stamina reports it."""
    seen: list = []
    stamina.instrumentation.set_on_retry_hooks([seen.append])
    yield seen
    stamina.instrumentation.set_on_retry_hooks(None)


def _moving(error: BaseException) -> bool:
    return isinstance(error, KpdError) and error.status == 503 and error.code in RETRYABLE


def test_client_retries_while_leadership_moves_until_its_deadline(
    sidecar_factory, retries, new_topic
):
    # One shard: a leads it, b stands by and waits for the group (no early takeover), so b
    # cannot lead before a's session times out.
    one = {"shards": "1", "early_takeover": "false"}
    first = sidecar_factory("a", **one).start()
    standby = sidecar_factory("b", **one).start()
    topic = new_topic()
    first.terminate(signal.SIGKILL)

    started = time.monotonic()
    with KpdClient(standby.url, retry_deadline_s=1.5) as kpd, pytest.raises(KpdError) as gave_up:
        kpd.group("g")
    assert _moving(gave_up.value) and gave_up.value.retry_after_s == 1.0
    assert time.monotonic() - started < 1.5  # the next wait would end past the deadline
    assert [r.wait_for for r in retries] == [1.0]  # waited what Retry-After said

    async def async_call() -> None:
        async with AsyncKpdClient(standby.url, retry_deadline_s=1.5) as kpd:
            await kpd.pop("g", topic)

    retries.clear()
    with pytest.raises(KpdError) as gave_up:
        asyncio.run(async_call())
    assert _moving(gave_up.value)
    assert [r.wait_for for r in retries] == [1.0]

    retries.clear()
    with KpdClient(standby.url, retry_deadline_s=0) as kpd, pytest.raises(KpdError):
        kpd.group("g")
    assert retries == []  # no deadline, no retry

    with KpdClient(standby.url, retry_deadline_s=60) as kpd:
        assert kpd.group("g")["node"] == "b"  # waited until b took over
    assert len(retries) >= 2
    assert all(_moving(r.caused_by) and r.wait_for == 1.0 for r in retries)
