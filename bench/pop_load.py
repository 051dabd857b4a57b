"""What `bench/pop.py` and `bench/revive.py` drive: a backlog on a topic, a `kpd run` process,
its HTTP pop and ack, client processes, and the CPU a phase costs the sidecar and the broker.
"""

from __future__ import annotations

import argparse
import contextlib
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from bench import broker_jit
from devtools.local_sidecar import (
    SidecarProcess,
    broker_pid,
    isolated_env,
    process_cpu_s,
)

VALUE_BYTES = 100
PARTITIONS = 3
INVISIBLE_MS = 120_000  # longer than any phase: no lease expires while measuring


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


# -- Kafka helpers (topics: `bench.delay_load.create_topic`) ------------------------------------


def produce_backlog(
    bootstrap: str, topic: str, n: int, keys: int = 0, **config: Any
) -> tuple[float, Producer]:
    """`n` records (the bench's shape) flushed to `topic`: (records/s, the producer); each with
    a key of its own, or one of `keys` keys in turn. With a `transactional.id` in `config` they
    are written in one transaction left open."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            **config,
        }
    )
    if "transactional.id" in config:
        producer.init_transactions(30)
        producer.begin_transaction()
    value = b"v" * VALUE_BYTES
    start = time.monotonic()
    for i in range(n):
        while True:
            try:
                producer.produce(topic, value, f"key-{i % keys if keys else i:012d}".encode())
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120) != 0:
        raise RuntimeError("backlog not fully produced")
    return n / (time.monotonic() - start), producer


def raw_consume(bootstrap: str, topic: str, n: int, limit_s: float) -> tuple[int, float]:
    """One plain consumer reading the whole topic from the beginning: (records, records/s)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-raw-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got, start, first_batch = 0, None, 0
    deadline = time.monotonic() + limit_s
    while got < n and time.monotonic() < deadline:
        batch = consumer.consume(1000, 0.5)
        good = sum(1 for m in batch if m.error() is None)
        if good and start is None:
            start, first_batch = time.monotonic(), good  # the rate counts after the first batch
        got += good
    elapsed = time.monotonic() - (start or time.monotonic())
    consumer.close()
    return got, (got - first_batch) / elapsed if elapsed > 0 else 0.0


# -- the sidecar -----------------------------------------------------------------------------


def add_leases_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--leases", choices=("durable", "memory"), default="durable",
                        help="every group's lease mode (docs/lease-modes.md)")  # fmt: skip


class Sidecar(SidecarProcess):
    def __init__(
        self, bootstrap: str, home: Path, leases: str = "durable", ordering: str = "none"
    ) -> None:
        env = isolated_env(
            bootstrap,
            "bench-pop",
            home / "data",
            f"bench-{uuid.uuid4().hex[:6]}",
            log_level="WARNING",
            group_defaults__leases=leases,  # every group's: docs/lease-modes.md
            group_defaults__ordering=ordering,  # docs/fifo.md
        )
        super().__init__(env, home / "sidecar.log")
        self.buffer = env["KPD_BUFFER_TOPIC"]

    def start(self) -> float:
        return self.launch(timeout_s=300)

    def warm(self, group: str, topic: str) -> None:
        """First pop of a group creates its fetcher (and retry / DLQ topics): do it untimed."""
        with httpx.Client(base_url=self.url, timeout=60) as http:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                got = pop(http, group, topic, 1, wait_ms=1000)
                if got:
                    ack(http, group, [m["receipt"] for m in got])
                    return
        raise RuntimeError(f"warm-up pop of {group} got nothing")


def pop(http: httpx.Client, group: str, topic: str, n: int, wait_ms: int = 0) -> list[dict]:
    answer = http.post(
        f"/v1/groups/{group}/topics/{topic}/pop",
        json={"max_messages": n, "invisible_ms": INVISIBLE_MS, "wait_ms": wait_ms},
        timeout=wait_ms / 1000 + 60,
    )
    answer.raise_for_status()
    return list(answer.json()["messages"])


def ack(http: httpx.Client, group: str, receipts: list[str]) -> list[dict]:
    answer = http.post(f"/v1/groups/{group}/ack", json={"receipts": receipts}, timeout=60)
    answer.raise_for_status()
    return list(answer.json()["results"])


def run_processes(
    ctx: Any,
    target_fn: Any,
    args_for: Any,
    procs: int,
    limit_s: float,
    meanwhile: Any = lambda: None,
) -> list:
    """Run `procs` processes of `target_fn(*args_for(i), out)`; `meanwhile()` once all started."""
    out = ctx.Queue()
    workers = [ctx.Process(target=target_fn, args=(*args_for(i), out)) for i in range(procs)]
    for w in workers:
        w.start()
    meanwhile()
    results = []
    with contextlib.suppress(Exception):
        for _ in workers:
            results.append(out.get(timeout=limit_s + 90))
    for w in workers:
        w.join(10)
        if w.is_alive():
            w.terminate()
    return results


class CpuMeter:
    """CPU of the sidecar (if any) and the broker from now on, to split a phase's cost per
    1,000 records between kpd, the broker and the clients (all on the same cores)."""

    def __init__(self, sidecar: Sidecar | None) -> None:
        self._sidecar, self._broker = sidecar, broker_pid()
        self._kpd0 = sidecar.cpu_s() if sidecar is not None else 0.0
        self._broker0, self._wall0 = process_cpu_s(self._broker), time.monotonic()
        self._jit0 = broker_jit.compiler_cpu_s(self._broker)
        self._kpd1, self._broker1, self._wall1 = self._kpd0, self._broker0, self._wall0
        self._jit1 = self._jit0

    def until(self, counter: Any, target: int, stop_at: float) -> None:
        """Read the end once the clients have `target` records (or time is up), so the idle
        tail of a phase (clients noticing the end, members leaving) is not counted."""
        while counter.value < target and time.time() < stop_at:
            time.sleep(0.005)
        self._kpd1 = self._sidecar.cpu_s() if self._sidecar is not None else 0.0
        self._broker1, self._wall1 = process_cpu_s(self._broker), time.monotonic()
        self._jit1 = broker_jit.compiler_cpu_s(self._broker)

    def split(self, records: int, clients_cpu_s: float) -> dict[str, float]:
        kpd, broker = self._kpd1 - self._kpd0, self._broker1 - self._broker0
        per_1k = 1000 / max(records, 1)
        return {
            "kpd": kpd * per_1k,
            "broker": broker * per_1k,
            "broker_jit": (self._jit1 - self._jit0) * per_1k,  # part of "broker"
            "clients": clients_cpu_s * per_1k,
            "kpd_cores": kpd / max(self._wall1 - self._wall0, 1e-9),
        }
