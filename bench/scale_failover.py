"""Failover and takeover runs of `bench/scale.py`: SIGKILL of a sidecar under a steady due load,
and of a pop leader with a pop-state topic of a given size and groups holding leases."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from pathlib import Path

import httpx
import numpy as np
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from bench.delay_load import (
    consumer,
    create_topic,
    now_ms,
    produce_fast,
)
from bench.scale_parts import SHARDS, Sidecar, http_client
from foundation.shards import ShardMap
from revive.ledger import Outcome
from revive.records import AckRecord, CheckpointRecord, pack_batch


def failover(
    bootstrap: str, admin: AdminClient, kills: int, home: Path, workers: int = 1
) -> list[float]:
    """Seconds from each SIGKILL until every shard the killed sidecar led has delivered again."""
    namespace = f"bench-fo-{uuid.uuid4().hex[:6]}"
    nodes = [
        Sidecar(bootstrap, home / "fo", namespace, name, workers=str(workers)) for name in "ab"
    ]
    for node in nodes:
        node.launch(timeout_s=300)
    shards = ShardMap(SHARDS, SHARDS)
    target = create_topic(admin, f"bench-fo-t-{uuid.uuid4().hex[:6]}")
    buffer = nodes[0].env["KPD_BUFFER_TOPIC"]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    reader = consumer(bootstrap, target)
    results = []
    try:
        for kill in range(kills):
            victim = nodes[kill % 2]
            _wait(lambda: all(node.led() for node in nodes), 120)
            lost = victim.led()
            killed_at = now_ms()
            victim.terminate(signal.SIGKILL)
            # A schedule due every 10 ms from now on; once each of the victim's shards has
            # delivered one, by the other sidecar, the failover is over.
            last = _every_shard_delivers(producer, reader, buffer, target, shards, lost, killed_at)
            results.append((last - killed_at) / 1000)
            victim.launch(timeout_s=300)
    finally:
        producer.flush(10)
        reader.close()
        for node in nodes:
            node.stop()
    return results


def _every_shard_delivers(producer, reader, buffer, target, shards, lost, killed_at) -> int:
    """The broker's append time of the delivery that leaves no shard of `lost` without one."""
    waiting = set(lost)
    i = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        sid = f"fo-{killed_at}-{i}"
        headers = [
            ("kpd-target", target.encode()),
            ("kpd-delay-ms", b"0"),
            ("kpd-id", sid.encode()),
        ]
        producer.produce(buffer, b"x", sid.encode(), headers=headers)
        producer.poll(0)
        i += 1
        for m in reader.consume(1000, 0.01):
            if m.error() is not None:
                continue
            rid = dict(m.headers())["kpd-id"].decode()
            if rid.startswith(f"fo-{killed_at}-") and shards.of_key(rid) in waiting:
                waiting.discard(shards.of_key(rid))
                if not waiting:
                    return m.timestamp()[1]
    raise RuntimeError("the killed sidecar's shards never delivered again")


def _wait(condition, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        time.sleep(0.1)


# -- takeover against pop-state size -----------------------------------------------------------


def takeover(
    bootstrap: str, admin: AdminClient, records: int, home: Path, groups: int = 1
) -> tuple[float, float, float, float]:
    """(seconds from kill to the standby's first pop of any group, the median group's first
    message, every group's, cold start of the first leader). Each group leased 10 messages
    before the kill, so the new leader resumes one fetcher per group."""
    namespace = f"bench-to-{uuid.uuid4().hex[:6]}"
    one = {"workers": "1", "shards": "1", "election_session_timeout_ms": "6000"}
    a = Sidecar(bootstrap, home / f"to{records}-{groups}", namespace, "a", **one)
    history = create_topic(admin, f"{namespace}.pop-state")  # settled leases of long ago
    _settled_history(bootstrap, history, records)
    started = time.monotonic()
    a.launch(timeout_s=900)
    cold = time.monotonic() - started
    topic = create_topic(admin, f"bench-to-p-{uuid.uuid4().hex[:6]}")
    produce_fast(bootstrap, topic, ((f"p-{i}".encode(), []) for i in range(1000)))
    names = [f"g-{uuid.uuid4().hex[:6]}-{i}" for i in range(groups)]
    with http_client(a.url) as http:
        for group in names:
            http.post(
                f"/v1/groups/{group}/topics/{topic}/pop", json={"max_messages": 10, "wait_ms": 3000}
            )
    time.sleep(3)  # the leader commits its replay floor once a second
    b = Sidecar(bootstrap, home / f"to{records}-{groups}", namespace, "b", **one)
    b.launch(timeout_s=900)
    killed = time.monotonic()
    a.terminate(signal.SIGKILL)
    with http_client(b.url) as http:  # until b leads the shard: its stats answer then
        while http.get(f"/v1/groups/{names[0]}").status_code != 200:
            time.sleep(0.02)
    path = f"/v1/groups/{{}}/topics/{topic}/pop"
    served = asyncio.run(_first_messages(b.url, path, names, killed))
    b.stop()
    times = list(served.values())
    return min(times), float(np.percentile(times, 50)), max(times), cold


async def _first_messages(url: str, path: str, groups: list[str], since: float) -> dict[str, float]:
    """Each group's worker long-polls at once, as a deployment's workers would: seconds from
    `since` to each group's first message. (Polled one after the other, every group's pop is a
    transaction of its own: 100 groups took 1-2 s of sequential pops on top of the takeover.)"""
    limits = httpx.Limits(max_connections=len(groups) + 1, keepalive_expiry=2.0)

    async def first(http: httpx.AsyncClient, group: str) -> tuple[str, float]:
        while True:
            answer = await http.post(path.format(group), json={"max_messages": 1, "wait_ms": 5000})
            if answer.status_code == 200 and answer.json()["messages"]:
                return group, time.monotonic() - since
            if answer.status_code != 200:
                await asyncio.sleep(0.05)

    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
        return dict(await asyncio.gather(*(first(http, group) for group in groups)))


def _settled_history(bootstrap: str, topic: str, records: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(records):
        checkpoint = CheckpointRecord("old", "t", 0, i + 1, (i,), (1,), 0, 0)
        ack = AckRecord("old", "t", 0, i + 1, i, Outcome.ACKED, 0)
        value = pack_batch([checkpoint.to_bytes(), ack.to_bytes()])
        while True:
            try:
                producer.produce(topic, value, b"old/t/0")
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(300) == 0
