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


def test_helpers_are_reused_and_a_stuck_one_does_not_hold_the_next_call(monkeypatch) -> None:
    monkeypatch.setattr(bounded_call, "GRACE_S", 0.05)
    monkeypatch.setattr(bounded_call, "_helpers", bounded_call._Helpers())

    def whose() -> threading.Thread:
        return threading.current_thread()

    helpers = {call_within(1.0, "who", whose) for _ in range(10)}
    # Reused: a helper is idle again right after its call (the next call may come a moment before
    # it says so, hence 2); a thread per call would make 10.
    assert len(helpers) <= 2

    release, stuck = threading.Event(), []

    def hang() -> None:
        stuck.append(threading.current_thread())
        release.wait(30)

    with pytest.raises(KafkaException):
        call_within(0.05, "stuck call", hang)
    assert stuck[0].name == "bounded stuck call"  # how a stack dump names it
    assert call_within(1.0, "who", whose) is not stuck[0]  # answered while that one is stuck
    release.set()
