"""The bound around librdkafka calls that ignore their timeout (pure threads and time)."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from foundation import bounded_call
from foundation.bounded_call import call_within


def test_a_call_that_returns_gives_its_value() -> None:
    assert call_within(1.0, "add", lambda a, b: a + b, 2, 3) == 5


def test_a_call_that_raises_raises_in_the_callers_thread() -> None:
    def refuse() -> None:
        raise KafkaException(KafkaError(KafkaError._FENCED, "fenced"))

    with pytest.raises(KafkaException) as raised:
        call_within(1.0, "refuse", refuse)
    assert raised.value.args[0].code() == KafkaError._FENCED


def test_a_call_stuck_past_its_timeout_times_out_at_the_bound(monkeypatch) -> None:
    monkeypatch.setattr(bounded_call, "GRACE_S", 0.1)
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(KafkaException) as raised:
        call_within(0.2, "stuck call", release.wait, 30)
    waited = time.monotonic() - started
    release.set()
    assert raised.value.args[0].code() == KafkaError._TIMED_OUT
    assert "stuck call" in raised.value.args[0].str()
    assert 0.3 <= waited < 5
