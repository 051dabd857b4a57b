"""No silent stall (docs/principles.md, 7): broker outages, a paused broker, a paused leader.

Each test runs its own broker, which it stops, pauses (SIGSTOP) and restarts, and real sidecars
under delay and pop load. Nothing may be lost, delivered twice or early; readiness must say what
is wrong while it is wrong, and every sidecar must be ready again soon after the broker is back.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_helpers import (
    led_shards,
    now_ms,
    topic_ready,
    unique,
    wait_delivering,
    wait_for,
)
from load_helpers import DelayLoad, PopLoad, readiness, ready

from devtools.broker_for_tests import free_port
from devtools.local_kafka import LocalKafka

pytestmark = pytest.mark.timeout(600)  # brokers stop and start several times per test
SESSION_TIMEOUT_MS = "2000"
READY_AFTER_BROKER_S = 30  # every sidecar ready again within this of the broker's return
# Broker stop/start cycles per run: 2 in `make test`; KPD_TEST_OUTAGE_CYCLES=10 to measure.
OUTAGE_CYCLES = int(os.environ.get("KPD_TEST_OUTAGE_CYCLES", "2"))


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LocalKafka]:
    """A broker of this test alone: it may be stopped and paused."""
    kafka = LocalKafka(home=tmp_path / "kafka", port=free_port())
    kafka.start()
    yield kafka
    pid = kafka.running_pid()
    if pid is not None:
        os.kill(pid, signal.SIGCONT)
    kafka.stop()


def create_topic(bootstrap: str, prefix: str, partitions: int = 1) -> str:
    """A topic of this test's broker, with its leaders known: a sidecar asked for it a moment
    after its creation found it without one and answered `unknown_topic` (a full run's)."""
    name = unique(prefix)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)
    wait_for(lambda: topic_ready(admin, name, partitions), 30, f"topic {name} in metadata")
    return name


def test_broker_restarts_under_load_lose_nothing(sidecar_factory, broker: LocalKafka) -> None:
    bootstrap = broker.bootstrap
    sidecars = [
        sidecar_factory(node, bootstrap=bootstrap, election_session_timeout_ms=SESSION_TIMEOUT_MS)
        .start()
        for node in ("a", "b")
    ]  # fmt: skip
    target, popped = create_topic(bootstrap, "out"), create_topic(bootstrap, "work", 2)
    with sidecars[0].client() as http:
        wait_delivering(http, create_topic(bootstrap, "warm"))
    values = [f"job-{i}".encode() for i in range(400)]
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 300_000})
    for value in values:
        producer.produce(popped, value)
    assert producer.flush(30) == 0
    recoveries = []
    with (
        DelayLoad(bootstrap, sidecars[0].env["KPD_BUFFER_TOPIC"], target) as delay,
        PopLoad(sidecars[1].url, unique("g"), popped, values, 2) as pop,
    ):
        for _ in range(OUTAGE_CYCLES):
            wait_for(lambda: len(delay.acknowledged) > 50, 60, "delay load flowing")
            broker.stop()
            for sidecar in sidecars:
                wait_for(
                    lambda s=sidecar: "kafka unreachable" in readiness(s.url), 30,
                    "unready, saying Kafka is away",
                )  # fmt: skip
            broker.start()
            back = time.monotonic()
            for sidecar in sidecars:
                wait_for(
                    lambda s=sidecar: ready(s.url), READY_AFTER_BROKER_S,
                    f"{sidecar.env['KPD_NODE_ID']} ready after the broker returned",
                )  # fmt: skip
            recoveries.append(round(time.monotonic() - back, 1))
        pop.wait_settled()
    print(f"\nready again after the broker returned ({OUTAGE_CYCLES} cycles): {recoveries} s")
    delay.assert_delivered()
    pop.assert_each_acked_once()


def test_a_paused_broker_shows_as_a_stall_and_nothing_is_lost(
    sidecar_factory, broker: LocalKafka
) -> None:
    bootstrap = broker.bootstrap
    leader = sidecar_factory(
        "a", bootstrap=bootstrap, kafka_timeout_ms="2000",
        election_session_timeout_ms=SESSION_TIMEOUT_MS,
    ).start()  # fmt: skip
    target = create_topic(bootstrap, "out")
    with leader.client() as http:
        wait_delivering(http, create_topic(bootstrap, "warm"))
    pid = broker.running_pid()
    assert pid is not None
    with DelayLoad(bootstrap, leader.env["KPD_BUFFER_TOPIC"], target) as delay:
        wait_for(lambda: len(delay.acknowledged) > 100, 60, "delay load flowing")
        workers_before = leader.worker_pids()
        os.kill(pid, signal.SIGSTOP)
        paused_at = time.monotonic()
        try:
            wait_for(lambda: "stalled" in readiness(leader.url), 10, "the stall on /readyz")
            reported_s = time.monotonic() - paused_at
            time.sleep(15)  # a pause longer than the sidecar's give-up bound (3 x 2 s + 5 s)
        finally:
            os.kill(pid, signal.SIGCONT)
        resumed = time.monotonic()
        wait_for(lambda: ready(leader.url), READY_AFTER_BROKER_S, "ready after the pause")
        print(
            f"\nstall reported {reported_s:.1f} s into the pause; ready "
            f"{time.monotonic() - resumed:.1f} s after it; worker restarted: "
            f"{leader.worker_pids() != workers_before}"
        )
    assert reported_s < 5
    delay.assert_delivered()


def test_a_paused_leader_is_fenced_and_delivers_nothing_twice(
    sidecar_factory, broker: LocalKafka
) -> None:
    bootstrap = broker.bootstrap
    a, b = (
        sidecar_factory(node, bootstrap=bootstrap, election_session_timeout_ms=SESSION_TIMEOUT_MS)
        .start()
        for node in ("a", "b")
    )  # fmt: skip
    target = create_topic(bootstrap, "out")
    with a.client() as http:
        wait_delivering(http, create_topic(bootstrap, "warm"))
    with DelayLoad(bootstrap, a.env["KPD_BUFFER_TOPIC"], target) as delay:
        wait_for(lambda: len(delay.acknowledged) > 100, 60, "delay load flowing")
        a.signal(signal.SIGSTOP)  # a zombie: alive, holding its producers, not heartbeating
        paused_at = now_ms()
        wait_for(lambda: led_shards(b) == {0, 1}, 30, "b leads every shard")
        taken_over_ms = now_ms() - paused_at
        time.sleep(2)  # b delivers for a while before the zombie wakes up
        a.signal(signal.SIGCONT)
        wait_for(lambda: ready(a.url), 60, "the old leader is back, as a standby or fresh")
    print(f"\nb took over {taken_over_ms} ms after a was paused")
    delay.assert_delivered(quiet_s=3.0)
