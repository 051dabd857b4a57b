"""The kpd phases of `bench/pop.py`: pop+ack throughput from client processes, pop latency with
messages waiting, produce-to-pop with a long poll, and a py-spy profile of a pop+ack run.
"""

from __future__ import annotations

import collections
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
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from bench import call_time, gc_pauses
from bench.delay_load import create_topic, now_ms
from bench.pop_load import (
    PARTITIONS,
    VALUE_BYTES,
    CpuMeter,
    Sidecar,
    ack,
    pct,
    pop,
    run_processes,
)


def pop_ack_worker(
    url: str,
    group: str,
    topic: str,
    batch: int,
    start_at: float,
    stop_at: float,
    target: int,
    acked_total: Any,
    clients: int,
    out: Any,
) -> None:
    """`clients` concurrent clients in this process, each popping and acking until the group's
    target is reached, the backlog ends or time; their figures together."""
    found: dict[str, Any] = {"acked": 0, "not_acked": 0, "pop_ms": [], "ack_ms": [], "last": 0.0}
    errors: list[str] = []
    lock = threading.Lock()

    def client() -> None:
        acked = not_acked = empties = 0
        pop_ms: list[float] = []
        ack_ms: list[float] = []
        last = 0.0
        with httpx.Client(base_url=url, timeout=60) as http:
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
                    last = time.time()
            except Exception as exc:  # reported, never hidden
                errors.append(repr(exc))
        with lock:
            found["acked"] += acked
            found["not_acked"] += not_acked
            found["pop_ms"] += pop_ms
            found["ack_ms"] += ack_ms
            found["last"] = max(found["last"], last)

    while time.time() < start_at:
        time.sleep(0.001)
    first, cpu0 = time.time(), time.process_time()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Until the last ack: not the idle tail (the clients end within one empty pop of it).
    out.put({**found, "first": first, "cpu_s": time.process_time() - cpu0,
             "error": "; ".join(errors) or None})  # fmt: skip


def kpd_throughput(
    ctx: Any,
    sidecar: Sidecar,
    topic: str,
    batch: int,
    procs: int,
    target: int,
    limit_s: float,
    clients: int = 1,  # per process
) -> dict[str, Any]:
    group = f"bench-pop-b{batch}-{uuid.uuid4().hex[:6]}"
    sidecar.warm(group, topic)
    counter = ctx.Value("q", 0)
    start_at = time.time() + 3  # spawned interpreters import first; the clock starts together
    stop_at = start_at + limit_s
    meter: list[CpuMeter] = []

    def args_for(_: int) -> tuple:
        return (sidecar.url, group, topic, batch, start_at, stop_at, target - 1, counter, clients)

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
    topic = create_topic(admin, f"bench-p2p-{uuid.uuid4().hex[:6]}", PARTITIONS)
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
