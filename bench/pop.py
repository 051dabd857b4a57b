"""Benchmark of kpd pop consumption against raw Kafka consume and a Kafka share group.

    .venv/bin/python bench/pop.py                      # local broker under .kpd/bench-kafka
    KPD_BOOTSTRAP=127.0.0.1:9092 .venv/bin/python bench/pop.py --records 100000

One run, one broker, one `kpd run` process (real Kafka, real HTTP), one pre-produced topic of
`--records` records (100-byte value, 16-byte key, 3 partitions), printing:
  1. raw confluent-kafka consume throughput of that topic (one consumer, the physical reference);
  2. kpd pop+ack throughput over HTTP with batches of 1, 10, 100 and 1000: `--procs` client
     processes, each a pop -> ack loop with httpx, one fresh pop group per batch size (so every
     batch size starts from the whole backlog); msgs/s acked, the client-side pop / ack round
     trips under that load, and the CPU split (below);
  3. pop latency p50/p99 with messages waiting: one client, sequential pops of 1 and 10 (each
     followed by an untimed ack), on a fresh group of the same topic, and the sidecar's garbage
     collections meanwhile (`bench/gc_pauses.py`);
  4. produce-to-pop latency with long poll: a pop parked with wait_ms 20000, then one record
     produced (linger.ms 0); latency = answer received - the record's CreateTime;
  5. a Kafka share group (KIP-932, confluent-kafka ShareConsumer, explicit acknowledgement, each
     record ACCEPTed) with the same number of processes and max.poll.records = batch size (best
     effort in librdkafka: the observed mean poll size is printed), acknowledgements sent by
     commit_async, or by commit_sync every batch. A share group hands a member its partitions
     only on a heartbeat (5 s apart), so members that join a second apart can leave part of the
     backlog waiting seconds for one of them: each phase first lets every member receive a
     warm-up record, and its backlog (the same size and shape, on a topic of its own) is written
     in one transaction that commits only then (the group reads read_committed), so the rate
     counts from the moment the whole backlog became visible to a settled group.
Before phase 2, uncounted rounds of pop+ack at batch 10 run until the fresh broker's JIT compiler
is quiet (`bench/broker_jit.py`; bounded by `--warm-up-s`), so that kpd's phases, which come
first, do not share the cores with it while the share group's, which come last, do not.
Throughput phases (2 and 5) print their CPU split: core-seconds per 1,000 records of the sidecar
(supervisor and worker), the broker (and of that its JIT compiler) and the client processes, all
on the same cores, since on a small machine what the clients and the broker burn is what kpd
cannot have. Every phase is bounded
in count (`--records`) and time (`--phase-s`). With `--profile-s N` and py-spy installed, an extra
(uncounted) batch-100 run is profiled for N s and the top frames of the worker's pop threads are
printed.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import multiprocessing as mp
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import broker_jit, call_time, gc_pauses  # noqa: E402
from devtools.broker_for_tests import broker_for_tests  # noqa: E402
from devtools.local_sidecar import (  # noqa: E402
    SidecarProcess,
    broker_pid,
    isolated_env,
    process_cpu_s,
)

VALUE_BYTES = 100
PARTITIONS = 3
INVISIBLE_MS = 120_000  # longer than any phase: no lease expires while measuring
BATCHES = (1, 10, 100, 1000)
SHARE_BATCHES = (10, 100, 1000)
WARM_UP_RECORDS = 3_000  # on a topic of their own, so every share group member gets some
WARM_UP_LIMIT_S = 30.0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


# -- Kafka helpers ---------------------------------------------------------------------------


def create_topic(admin: AdminClient, name: str, partitions: int = PARTITIONS) -> str:
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)
    return name


def produce_backlog(bootstrap: str, topic: str, n: int, **config: Any) -> tuple[float, Producer]:
    """`n` records (the bench's shape) flushed to `topic`: (records/s, the producer). With a
    `transactional.id` in `config` they are written in one transaction left open."""
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
                producer.produce(topic, value, f"key-{i:012d}".encode())
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


class Sidecar(SidecarProcess):
    def __init__(self, bootstrap: str, home: Path) -> None:
        env = isolated_env(
            bootstrap,
            "bench-pop",
            home / "data",
            f"bench-{uuid.uuid4().hex[:6]}",
            log_level="WARNING",
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


# -- client processes ------------------------------------------------------------------------


def pop_ack_worker(
    url: str,
    group: str,
    topic: str,
    batch: int,
    start_at: float,
    stop_at: float,
    target: int,
    acked_total: Any,
    out: Any,
) -> None:
    """One client: pop -> ack until the group's target is reached, the backlog ends or time."""
    acked = not_acked = empties = 0
    pop_ms: list[float] = []
    ack_ms: list[float] = []
    first = last = 0.0
    error = None
    with httpx.Client(base_url=url, timeout=60) as http:
        while time.time() < start_at:
            time.sleep(0.001)
        first, cpu0 = time.time(), time.process_time()
        cpu_last = cpu0
        try:
            while time.time() < stop_at and acked_total.value < target and empties < 3:
                t0 = time.perf_counter()
                got = pop(http, group, topic, batch, wait_ms=0 if empties == 0 else 500)
                t1 = time.perf_counter()
                if not got:
                    empties += 1
                    continue
                empties = 0
                results = ack(http, group, [m["receipt"] for m in got])
                t2 = time.perf_counter()
                pop_ms.append((t1 - t0) * 1000)
                ack_ms.append((t2 - t1) * 1000)
                ok = sum(1 for r in results if r["status"] == "acked")
                acked += ok
                not_acked += len(results) - ok
                with acked_total.get_lock():
                    acked_total.value += ok
                last, cpu_last = time.time(), time.process_time()
        except Exception as exc:  # reported, never hidden
            error = repr(exc)
    out.put(
        {
            "acked": acked,
            "not_acked": not_acked,
            "first": first,
            "last": last,
            "pop_ms": pop_ms,
            "ack_ms": ack_ms,
            "cpu_s": cpu_last - cpu0,  # until its last ack: not the idle tail
            "error": error,
        }
    )


def share_worker(
    bootstrap: str,
    group: str,
    topics: tuple[str, str],
    batch: int,
    sync_commit: bool,
    stop_at: float,
    target: int,
    accepted_total: Any,
    ready: Any,
    index: int,
    out: Any,
) -> None:
    """One share consumer: poll, ACCEPT each record, send the acknowledgements.

    `topics` = (warm-up, measured): the first warm-up record sets `ready[index]`; only records of
    the measured topic count. async: commit_async once per poll (acks also ride on the next
    ShareFetch); sync: commit_sync after every `batch` acknowledgements (one acknowledgement
    round trip per `batch` records, like a kpd ack call), since max.poll.records does not bound
    the poll size.
    """
    from confluent_kafka import AcknowledgeType, ShareConsumer

    warm_topic, topic = topics
    accepted = polls = pending = 0
    first = last = cpu0 = cpu_last = 0.0
    error = None
    consumer = None
    try:
        consumer = ShareConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "share.acknowledgement.mode": "explicit",
                "max.poll.records": batch,
                "log_level": 3,
            }
        )
        consumer.subscribe([warm_topic, topic])
        idle_since = time.time()
        while time.time() < stop_at and accepted_total.value < target:
            polled_at = time.process_time()
            messages = consumer.poll(0.5)
            good = 0
            for message in messages:
                if message.error() is not None:
                    continue
                consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                pending += 1
                if message.topic() == warm_topic:
                    ready[index] = 1
                else:
                    good += 1
                if sync_commit and pending >= batch:
                    consumer.commit_sync(30)
                    pending = 0
            if sync_commit and pending:
                consumer.commit_sync(30)
                pending = 0
            elif messages and not sync_commit:
                consumer.commit_async()
            if not good:
                if accepted and time.time() - idle_since > 5:
                    break  # backlog drained by the others
                continue
            now = time.time()
            if not first:
                first, cpu0 = now, polled_at
            last, idle_since, cpu_last = now, now, time.process_time()
            polls += 1
            accepted += good
            with accepted_total.get_lock():
                accepted_total.value += good
    except Exception as exc:
        error = repr(exc)
    finally:
        if consumer is not None:
            with contextlib.suppress(Exception):
                consumer.close()
    out.put(
        {
            "accepted": accepted,
            "polls": polls,
            "first": first,
            "last": last,
            # From the poll that brought its first measured record to its last: librdkafka's
            # threads included, the warm-up and the idle tail not.
            "cpu_s": cpu_last - cpu0,
            "error": error,
        }
    )


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


# -- phases ----------------------------------------------------------------------------------


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


def kpd_throughput(
    ctx: Any,
    sidecar: Sidecar,
    topic: str,
    batch: int,
    procs: int,
    target: int,
    limit_s: float,
) -> dict[str, Any]:
    group = f"bench-pop-b{batch}-{uuid.uuid4().hex[:6]}"
    sidecar.warm(group, topic)
    counter = ctx.Value("q", 0)
    start_at = time.time() + 3  # spawned interpreters import first; the clock starts together
    stop_at = start_at + limit_s
    meter: list[CpuMeter] = []

    def args_for(_: int) -> tuple:
        return (sidecar.url, group, topic, batch, start_at, stop_at, target - 1, counter)

    def sample_cpu() -> None:
        while time.time() < start_at:
            time.sleep(0.001)
        meter.append(CpuMeter(sidecar))
        meter[0].until(counter, target - 1, stop_at)

    sampler = threading.Thread(target=sample_cpu)
    gc_before = gc_pauses.read(sidecar.url)
    sampler.start()
    results = run_processes(ctx, pop_ack_worker, args_for, procs, limit_s + 3)
    sampler.join()
    time.sleep(gc_pauses.ROUND_S)  # the worker moves the phase's last pauses into its histogram
    collected = gc_pauses.read(sidecar.url).minus(gc_before)
    acked = sum(r["acked"] for r in results)
    split = meter[0].split(acked, sum(r["cpu_s"] for r in results))
    span = max((r["last"] for r in results), default=0) - min(
        (r["first"] for r in results), default=0
    )
    pops = [x for r in results for x in r["pop_ms"]]
    acks = [x for r in results for x in r["ack_ms"]]
    return {
        "batch": batch,
        "acked": acked,
        "not_acked": sum(r["not_acked"] for r in results),
        "seconds": span,
        "rate": acked / span if span > 0 else 0.0,
        "sidecar_cpu": split["kpd_cores"],
        "cpu_per_1k": split,
        "pop_p50": pct(pops, 50),
        "pop_p99": pct(pops, 99),
        "ack_p50": pct(acks, 50),
        "ack_p99": pct(acks, 99),
        "errors": [r["error"] for r in results if r["error"]],
        "processes_reporting": len(results),
        "gc": collected.row(),
        "gc_s_per_1k": collected.total_s() * 1000 / max(acked, 1),
    }


def pop_latency(sidecar: Sidecar, topic: str, batch: int, n: int, limit_s: float) -> dict:
    group = f"bench-lat-b{batch}-{uuid.uuid4().hex[:6]}"
    sidecar.warm(group, topic)
    pops: list[float] = []
    acks: list[float] = []
    deadline = time.monotonic() + limit_s
    gc_before = gc_pauses.read(sidecar.url)
    times_before = call_time.read(sidecar.url)
    with httpx.Client(base_url=sidecar.url, timeout=60) as http:
        while len(pops) < n and time.monotonic() < deadline:
            t0 = time.perf_counter()
            got = pop(http, group, topic, batch)
            t1 = time.perf_counter()
            if not got:
                break
            pops.append((t1 - t0) * 1000)
            ack(http, group, [m["receipt"] for m in got])
            acks.append((time.perf_counter() - t1) * 1000)
    return {
        "batch": batch,
        "n": len(pops),
        "p50": pct(pops, 50),
        "p99": pct(pops, 99),
        "max": max(pops, default=float("nan")),
        "ack_p50": pct(acks, 50),
        "ack_p99": pct(acks, 99),
        "gc": gc_pauses.read(sidecar.url).minus(gc_before).row(),
        "where": call_time.read(sidecar.url)
        .minus(times_before)
        .calls_row({"pop": statistics.fmean(pops or [0]), "ack": statistics.fmean(acks or [0])}),
    }


def produce_to_pop(
    bootstrap: str, admin: AdminClient, sidecar: Sidecar, n: int, limit_s: float
) -> dict:
    topic = create_topic(admin, f"bench-p2p-{uuid.uuid4().hex[:6]}")
    group = f"bench-p2p-{uuid.uuid4().hex[:6]}"
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    producer.produce(topic, b"warm", b"warm")
    producer.flush(10)
    sidecar.warm(group, topic)
    latencies: list[float] = []
    misses = 0
    deadline = time.monotonic() + limit_s

    def parked_pop(http: httpx.Client) -> tuple[list[dict], int]:
        got = pop(http, group, topic, 1, wait_ms=20_000)
        return got, now_ms()

    with httpx.Client(base_url=sidecar.url, timeout=60) as http, ThreadPoolExecutor(1) as pool:
        for i in range(n):
            if time.monotonic() > deadline:
                break
            future = pool.submit(parked_pop, http)
            time.sleep(0.05)  # let the pop park in the sidecar
            producer.produce(topic, b"x" * VALUE_BYTES, f"p2p-{i}".encode())
            producer.flush(10)
            got, received = future.result(timeout=30)
            if not got:
                misses += 1
                continue
            latencies.append(received - got[0]["timestamp_ms"])
            ack(http, group, [m["receipt"] for m in got])
    return {
        "n": len(latencies),
        "misses": misses,
        "p50": pct(latencies, 50),
        "p99": pct(latencies, 99),
        "max": max(latencies, default=float("nan")),
    }


def configure_share_group(admin: AdminClient, name: str) -> None:
    """A share group that starts at the earliest offset and reads committed records only."""
    configs = {"share.auto.offset.reset": "earliest", "share.isolation.level": "read_committed"}
    resource = ConfigResource(
        ResourceType.GROUP,
        name,
        incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in configs.items()
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def share_throughput(
    ctx: Any,
    bootstrap: str,
    admin: AdminClient,
    batch: int,
    sync_commit: bool,
    procs: int,
    target: int,
    limit_s: float,
) -> dict[str, Any]:
    name = f"bench-share-b{batch}-{'sync' if sync_commit else 'async'}-{uuid.uuid4().hex[:6]}"
    warm, topic = create_topic(admin, f"{name}-warm"), create_topic(admin, name)
    produce_backlog(bootstrap, warm, WARM_UP_RECORDS)
    _, held = produce_backlog(bootstrap, topic, target, **{"transactional.id": name})
    configure_share_group(admin, name)
    counter, ready = ctx.Value("q", 0), ctx.Array("b", procs)
    stop_at = time.time() + limit_s + WARM_UP_LIMIT_S
    visible: list[float] = []
    meter: list[CpuMeter] = []

    def release_backlog() -> None:
        """Once every member has a warm-up record (or the limit passed), commit the backlog."""
        deadline = time.monotonic() + WARM_UP_LIMIT_S
        while sum(ready[:]) < procs and time.monotonic() < deadline:
            time.sleep(0.05)
        visible.append(time.time())
        meter.append(CpuMeter(None))
        held.commit_transaction(30)
        meter[0].until(counter, target, stop_at)

    def args_for(i: int) -> tuple:
        return (bootstrap, name, (warm, topic), batch, sync_commit, stop_at, target, counter,
                ready, i)  # fmt: skip

    results = run_processes(
        ctx, share_worker, args_for, procs, limit_s + WARM_UP_LIMIT_S, release_backlog
    )
    accepted = sum(r["accepted"] for r in results)
    span = max((r["last"] for r in results), default=0) - visible[0]
    polls = sum(r["polls"] for r in results)
    return {
        "cpu_per_1k": meter[0].split(accepted, sum(r["cpu_s"] for r in results)),
        "batch": batch,
        "sync": sync_commit,
        "accepted": accepted,
        "seconds": span,
        "rate": accepted / span if span > 0 else 0.0,
        "mean_poll": accepted / polls if polls else 0.0,
        "members_warm": sum(ready[:]),
        "errors": [r["error"] for r in results if r["error"]],
        "processes_reporting": len(results),
    }


def profile_sidecar(
    ctx: Any, sidecar: Sidecar, topic: str, procs: int, target: int, seconds: float
) -> list[str]:
    """Run batch-100 pop+ack (uncounted) while py-spy samples the sidecar; top frames."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(py_spy).exists():
        return ["py-spy not installed: no profile"]
    assert sidecar.process is not None
    raw = Path(tempfile.mkdtemp(prefix="kpd-bench-prof-")) / "sidecar.txt"
    spy = subprocess.Popen(
        [
            py_spy,
            "record",
            "--pid",
            str(sidecar.worker_pids()[0]),  # the worker: the supervisor only watches it
            "--duration",
            str(int(seconds)),
            "--rate",
            "100",
            "--format",
            "raw",
            "--threads",
            "--nonblocking",
            "--idle",
            "--output",
            str(raw),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    run = kpd_throughput(ctx, sidecar, topic, 100, procs, target, seconds)
    try:
        _, err = spy.communicate(timeout=seconds + 60)
    except subprocess.TimeoutExpired:
        spy.kill()
        _, err = spy.communicate()
    if not raw.exists():
        return [f"py-spy produced nothing: {err.decode(errors='replace')[-500:]}"]
    lines = [f"profiled batch-100 run: {run['rate']:,.0f} msgs/s (uncounted), file {raw}"]
    lines += summarise_profile(raw, ": pop[")
    return lines


def summarise_profile(raw: Path, focus: str) -> list[str]:
    """Wall-clock samples (idle included) per thread; for the threads whose name holds `focus`
    (the shards' pop services), where they spend their time: self frames with line numbers, and
    inclusive functions."""
    threads: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        threads[frames[0]] += count
        if focus not in frames[0]:
            continue
        total += count
        seen = set()
        for frame in frames[1:]:
            name = re.sub(r":\d+\)$", ")", frame)
            if name not in seen:
                inclusive[name] += count
                seen.add(name)
        own[frames[-1]] += count
    out = ["wall-clock samples per thread (100 Hz, idle included):"]
    out += [f"  {name}: {n}" for name, n in threads.most_common(12)]
    if not total:
        return out
    out.append(f"threads {focus!r}: {total} samples; top self frames (where their time goes):")
    out += [f"    {n / total:6.1%}  {name}" for name, n in own.most_common(20)]
    out.append("  top inclusive frames:")
    out += [f"    {n / total:6.1%}  {name}" for name, n in inclusive.most_common(30)]
    return out


# -- report ----------------------------------------------------------------------------------


def run(bootstrap: str, args: argparse.Namespace) -> None:
    ctx = mp.get_context("spawn")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    home = Path(tempfile.mkdtemp(prefix="kpd-bench-pop-"))
    load_start = os.getloadavg()
    print(f"broker {bootstrap}; sidecar files in {home}; load average at start {load_start}")
    topic = create_topic(admin, f"bench-pop-{uuid.uuid4().hex[:6]}")
    rate, _ = produce_backlog(bootstrap, topic, args.records)
    print(
        f"backlog: {args.records:,} records of {VALUE_BYTES} B value + 16 B key on {topic} "
        f"({PARTITIONS} partitions), produced at {rate:,.0f}/s"
    )

    raw_n, raw_rate = raw_consume(bootstrap, topic, args.records, args.phase_s)
    print(f"1. raw consume: {raw_n:,} records at {raw_rate:,.0f} msgs/s")

    sidecar = Sidecar(bootstrap, home)
    kpd: dict[int, dict] = {}
    latency: list[dict] = []
    p2p: dict = {}
    profile: list[str] = []
    try:
        print(f"sidecar ready in {sidecar.start():.1f} s at {sidecar.url}")
        warm_text = "none (--warm-up-s 0, or KPD_BOOTSTRAP)"
        broker = broker_jit.local_broker()
        if args.warm_up_s > 0 and broker is not None:
            warm = broker_jit.warm_up(
                broker,
                lambda: kpd_throughput(ctx, sidecar, topic, 10, args.procs, args.records, 10),
                args.warm_up_s,
            )
            warm_text = f"kpd pop+ack at batch 10, not counted: {warm.text()}"
        print(f"broker warm-up: {warm_text}", flush=True)
        for batch in BATCHES:
            r = kpd_throughput(ctx, sidecar, topic, batch, args.procs, args.records, args.phase_s)
            kpd[batch] = r
            print(
                f"2. kpd pop+ack batch {batch:>4}: {r['acked']:,} acked in {r['seconds']:.1f} s "
                f"= {r['rate']:,.0f} msgs/s; sidecar CPU {r['sidecar_cpu']:.0%} of one core; "
                f"pop p50/p99 {r['pop_p50']:.1f}/{r['pop_p99']:.1f} ms, "
                f"ack p50/p99 {r['ack_p50']:.1f}/{r['ack_p99']:.1f} ms under load; "
                f"CPU {cpu_text(r['cpu_per_1k'])}, of which GC {r['gc_s_per_1k']:.4f} "
                f"({r['gc']}); not acked {r['not_acked']}; errors {r['errors']}",
                flush=True,
            )
        for batch in (1, 10):
            r = pop_latency(sidecar, topic, batch, args.latency_pops, args.phase_s)
            latency.append(r)
            print(
                f"3. pop latency batch {batch:>2} (1 client, messages waiting, {r['n']} pops): "
                f"p50 {r['p50']:.2f} ms, p99 {r['p99']:.2f} ms, max {r['max']:.1f} ms "
                f"(its ack p50/p99 {r['ack_p50']:.2f}/{r['ack_p99']:.2f} ms); "
                f"GC pauses: {r['gc']}; {r['where']}",
                flush=True,
            )
        p2p = produce_to_pop(bootstrap, admin, sidecar, args.p2p_samples, args.phase_s * 2)
        print(
            f"4. produce-to-pop (long poll wait_ms 20000, {p2p['n']} records, "
            f"{p2p['misses']} empty answers): p50 {p2p['p50']:.1f} ms, "
            f"p99 {p2p['p99']:.1f} ms, max {p2p['max']:.1f} ms",
            flush=True,
        )
        if args.profile_s > 0:
            profile = profile_sidecar(ctx, sidecar, topic, args.procs, args.records, args.profile_s)
            print("\n".join(profile), flush=True)
    finally:
        sidecar.stop()

    share: dict[tuple[int, bool], dict] = {}
    share_error = None
    try:
        for batch, sync in [(b, s) for b in SHARE_BATCHES for s in (False, True)]:
            r = share_throughput(
                ctx, bootstrap, admin, batch, sync, args.procs, args.records, args.phase_s
            )
            share[(batch, sync)] = r
            mode = "commit_sync per batch" if sync else "commit_async per poll"
            print(
                f"5. share group max.poll.records {batch:>4} ({mode}): "
                f"{r['accepted']:,} accepted in "
                f"{r['seconds']:.1f} s = {r['rate']:,.0f} msgs/s; mean poll "
                f"{r['mean_poll']:.0f} records; {r['members_warm']} of {args.procs} members "
                f"warm at the start; CPU {cpu_text(r['cpu_per_1k'])}; errors {r['errors']}",
                flush=True,
            )
    except Exception as exc:
        share_error = repr(exc)
        print(f"5. share group: FAILED {share_error}")

    load_end = os.getloadavg()
    print_table(args, raw_rate, kpd, latency, p2p, share, load_start, load_end)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "raw": raw_rate,
                    "kpd": kpd,
                    "latency": latency,
                    "p2p": p2p,
                    "share": {f"{b}-{'sync' if s else 'async'}": r for (b, s), r in share.items()},
                    "share_error": share_error,
                    "load": [load_start, load_end],
                    "broker_warm_up": warm_text,
                    "profile": profile,
                },
                indent=1,
                default=str,
            )
        )


def cpu_text(split: dict[str, float]) -> str:
    return (
        f"kpd {split['kpd']:.3f} + broker {split['broker']:.3f} (JIT compiler "
        f"{split['broker_jit']:.3f}) + clients "
        f"{split['clients']:.3f} core-s per 1,000 records"
    )


def print_table(
    args: argparse.Namespace,
    raw_rate: float,
    kpd: dict[int, dict],
    latency: list[dict],
    p2p: dict,
    share: dict[tuple[int, bool], dict],
    load_start: tuple,
    load_end: tuple,
) -> None:
    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    print()
    print(f"| measure ({args.records:,} x {VALUE_BYTES} B, {PARTITIONS} partitions) | value |")
    print("|---|---|")
    print(f"| raw confluent-kafka consume, 1 consumer | {raw_rate:,.0f} msgs/s |")
    for batch, r in kpd.items():
        print(
            f"| kpd pop+ack, batch {batch}, {args.procs} procs | {r['rate']:,.0f} msgs/s "
            f"(pop p50/p99 {r['pop_p50']:.1f}/{r['pop_p99']:.1f} ms under load; "
            f"CPU {cpu_text(r['cpu_per_1k'])}) |"
        )
    for (batch, sync), r in share.items():
        mode = "commit_sync per batch" if sync else "commit_async per poll"
        print(
            f"| share group accept, max.poll.records {batch} ({mode}), {args.procs} procs "
            f"| {r['rate']:,.0f} msgs/s (mean poll {r['mean_poll']:.0f}; "
            f"CPU {cpu_text(r['cpu_per_1k'])}) |"
        )
    for r in latency:
        print(
            f"| pop latency batch {r['batch']}, 1 client | p50 {r['p50']:.2f} / p99 "
            f"{r['p99']:.2f} ms |"
        )
    if p2p:
        print(f"| produce-to-pop, long poll | p50 {p2p['p50']:.1f} / p99 {p2p['p99']:.1f} ms |")
    print()
    b100 = kpd.get(100, {}).get("rate", 0.0)
    if raw_rate:
        print(f"ratio kpd pop+ack batch 100 / raw consume: {b100 / raw_rate:.3f}")
    for batch in SHARE_BATCHES:
        if batch in kpd and (batch, False) in share and share[(batch, False)]["rate"]:
            ratio = kpd[batch]["rate"] / share[(batch, False)]["rate"]
            print(f"ratio kpd pop+ack / share group at batch {batch}: {ratio:.3f}")
    print()
    print(f"target pop+ack >= 50k msgs/s at batch 100: {b100:,.0f} -> {verdict(b100 >= 50_000)}")
    if (100, False) in share:
        s = share[(100, False)]["rate"]
        print(
            f"target pop+ack >= share group at batch 100: {b100:,.0f} vs {s:,.0f} -> "
            f"{verdict(b100 >= s)}"
        )
    for r in latency:
        print(
            f"target pop p99 <= 5 ms (batch {r['batch']}, waiting): {r['p99']:.2f} ms -> "
            f"{verdict(r['p99'] <= 5)}"
        )
    if p2p:
        print(
            f"target produce-to-pop p99 <= 20 ms: {p2p['p99']:.1f} ms -> "
            f"{verdict(p2p['p99'] <= 20)}"
        )
    print(f"load average start {load_start}, end {load_end}; cpus {os.cpu_count()}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--procs", type=int, default=4, help="client processes per phase")
    parser.add_argument("--phase-s", type=float, default=30, help="time bound of each phase")
    parser.add_argument("--latency-pops", type=int, default=500)
    parser.add_argument("--p2p-samples", type=int, default=200)
    parser.add_argument("--profile-s", type=float, default=0, help="py-spy the sidecar (0: off)")
    broker_jit.add_argument(parser)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    with broker_for_tests(os.environ, ROOT / ".kpd" / "bench-kafka") as bootstrap:
        run(bootstrap, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
