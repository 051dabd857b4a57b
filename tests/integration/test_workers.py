"""Several worker processes behind one `kpd run` (every core working), over real HTTP and Kafka."""

from __future__ import annotations

import os
import signal
import socket

import httpx
from kafka_helpers import (
    TopicReader,
    assert_exactly_once,
    buffer_record,
    led_shards,
    make_producer,
    metric_values,
    now_ms,
    produce_all,
    unique,
    wait_for,
)

from devtools.broker_for_tests import free_port
from kpd_client import KpdClient


def two_free_ports() -> int:
    """A free port whose next one is free too."""
    while True:
        base = free_port()
        try:
            with socket.create_server(("127.0.0.1", base + 1)):
                return base
        except OSError:
            continue


def test_workers_share_the_shards_the_port_and_the_metrics(
    sidecar_factory, new_topic, kafka_bootstrap
):
    sidecar = sidecar_factory("w", workers="2", shards="4").start()
    assert len(sidecar.worker_pids()) == 2
    wait_for(lambda: led_shards(sidecar) == {0, 1, 2, 3}, 60, "the workers lead every shard")
    target, topic, group = new_topic("out"), new_topic("work", partitions=4), unique("g")
    ids = [f"w-{i}" for i in range(400)]
    records = [buffer_record(target, value=b"x", delay_ms=0, schedule_id=i) for i in ids]
    produce_all(make_producer(kafka_bootstrap), sidecar.env["KPD_BUFFER_TOPIC"], records)
    produce_all(
        make_producer(kafka_bootstrap), topic, [(None, f"j{i}".encode(), []) for i in range(40)]
    )
    with TopicReader(kafka_bootstrap, target) as reader:
        messages = reader.read_count(len(ids), 60)
        assert_exactly_once(reader.read_for(1.0), set(ids))
    with KpdClient(sidecar.url) as kpd:
        popped = []
        while len(popped) < 40:
            popped += kpd.pop(group, topic, max_messages=40, wait_ms=1000)
        assert {r["status"] for r in kpd.ack(group, [m.receipt for m in popped])} == {"acked"}
    log = sidecar.env["KPD_DELIVERY_LOG_TOPIC"]
    with TopicReader(kafka_bootstrap, log) as reader:
        events = reader.read_until(lambda m: len(m) >= 2 * len(messages), 60, "log events")
    nodes = {event.value().split(b'"node":"')[1].split(b'"')[0] for event in events}
    assert nodes == {b"w-0", b"w-1"}  # both workers wrote: each leads shards
    with sidecar.client() as http:  # one /metrics for both workers, whichever answers
        values = metric_values(http)
        assert values["kpd_schedules_delivered_total"] >= len(ids)
        assert sum(v for k, v in values.items() if k.startswith("kpd_shard_leader{")) == 4


def test_a_killed_worker_is_started_again(sidecar_factory):
    sidecar = sidecar_factory("w", workers="2", shards="4").start()
    wait_for(lambda: led_shards(sidecar) == {0, 1, 2, 3}, 60, "the workers lead every shard")
    victim = sidecar.worker_pids()[0]
    os.kill(victim, signal.SIGKILL)
    started = now_ms()
    wait_for(
        lambda: len(sidecar.worker_pids()) == 2 and victim not in sidecar.worker_pids(), 30,
        "a new worker in its place",
    )  # fmt: skip
    wait_for(lambda: led_shards(sidecar) == {0, 1, 2, 3}, 60, "every shard led again")
    print(f"\nworker replaced and every shard led {now_ms() - started} ms after the kill")
    assert sidecar.running()


def test_the_sidecar_is_ready_once_every_worker_is(sidecar_factory):
    """Health checks reach whichever worker accepts on the shared port: when one answers ready,
    every worker of the sidecar must be (`make up` and compose wait for that answer)."""
    base = two_free_ports()
    sidecar_factory("w", workers="2", shards="4", worker_port_base=str(base)).start()
    answers = [httpx.get(f"http://127.0.0.1:{p}/readyz", timeout=5) for p in (base, base + 1)]
    assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
