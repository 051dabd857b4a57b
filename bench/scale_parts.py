"""What `bench/scale.py` and `bench/burst_calls.py` measure: a `kpd run` of several workers,
its schedules and pop+ack clients, the delivery log's counts, and snapshots of everyone's CPU."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import numpy as np
import orjson
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from bench.delay_load import (
    consumer,
)
from devtools.local_sidecar import (
    SidecarProcess,
    isolated_env,
    process_cpu_s,
    thread_cpu_s,
)
from kpd_client.base_client import CONNECTION_LIMITS

SHARDS = 8
SETTLE_S = 10.0  # after a sidecar is ready: standbys catching up, groups settling
FORWARDED, ANSWERED = "kpd_pop_forwarded_total", "kpd_pop_request_seconds_count"
STANDBY_CPU = "kpd_standby_cpu_seconds_total"
# Per worker process: its CPU seconds so far, and the part of it in librdkafka's threads.
WorkerCpu = dict[int, tuple[float, float]]
MULTIPROC = b"PROMETHEUS_MULTIPROC_DIR="  # the workers' shared metrics folder (`sidecar.workers`)


def http_client(url: str) -> httpx.Client:
    """Idle connections dropped before the sidecar's keep-alive closes them, as in the SDK."""
    return httpx.Client(base_url=url, timeout=60, limits=CONNECTION_LIMITS)


class Sidecar(SidecarProcess):
    def __init__(self, bootstrap: str, home: Path, namespace: str, name: str, **settings: str):
        settings = {"log_level": "WARNING", "shards": str(SHARDS), **settings}
        env = isolated_env(bootstrap, name, home / name, namespace, **settings)
        super().__init__(env, home / f"{name}.log")

    def cpu(self) -> WorkerCpu:
        return {
            pid: (process_cpu_s(pid), thread_cpu_s(pid, ("rdk:",))) for pid in self.worker_pids()
        }

    def delay_commits(self) -> tuple[float, float]:
        """The delay leaders' transaction commits so far, all workers: how many, seconds waited."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        found = {"count": 0.0, "sum": 0.0}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if family.name == "kpd_transaction_seconds" and sample.labels == {
                    "role": "delay",
                    "phase": "commit",
                }:
                    kind = sample.name.rsplit("_", 1)[1]
                    found[kind] = found.get(kind, 0.0) + sample.value
        return found["count"], found["sum"]

    def standby_cpu_s(self) -> float:
        """CPU seconds the workers' standbys spent so far (`kpd_standby_cpu_seconds_total`),
        from the workers' shared metrics folder (a sidecar of one worker has none: over HTTP,
        and then 0 unless another sidecar's shards are followed here)."""
        pids = self.worker_pids()
        if len(pids) < 2:
            return self.metrics().get(STANDBY_CPU, 0.0)
        environ = Path(f"/proc/{pids[0]}/environ").read_bytes().split(b"\0")
        folder = next(e.split(b"=", 1)[1] for e in environ if e.startswith(MULTIPROC))
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=folder.decode())
        return sum(
            sample.value
            for family in registry.collect()
            for sample in family.samples
            if sample.name == STANDBY_CPU
        )

    def calls(self, metric: str) -> Counter[str]:
        """A pop-group call counter of all workers, by call: `kpd_pop_forwarded_total` (sent on
        to another worker), `kpd_pop_request_seconds_count` (answered by a shard's leader)."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        prefix = f'{metric}{{call="'
        return Counter(
            {
                line[len(prefix) :].split('"')[0]: int(float(line.rsplit(" ", 1)[1]))
                for line in text.splitlines()
                if line.startswith(prefix)
            }
        )

    def led(self) -> set[int]:
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        prefix = 'kpd_shard_leader{shard="'
        return {
            int(line[len(prefix) :].split('"')[0])
            for line in text.splitlines()
            if line.startswith(prefix) and line.endswith(" 1.0")
        }


class Fleet:
    """The sidecars of one deployment, measured as one: their workers' CPU and call counters."""

    def __init__(self, sidecars: list[Sidecar]) -> None:
        self.sidecars = sidecars
        self.env = sidecars[0].env  # the topics: the same for every sidecar of a deployment
        self.urls = [sidecar.url for sidecar in sidecars]

    def cpu(self) -> WorkerCpu:
        return {pid: cpu for sidecar in self.sidecars for pid, cpu in sidecar.cpu().items()}

    def standby_cpu_s(self) -> float:
        return sum(sidecar.standby_cpu_s() for sidecar in self.sidecars)

    def delay_commits(self) -> tuple[float, float]:
        counts = [sidecar.delay_commits() for sidecar in self.sidecars]
        return sum(count for count, _ in counts), sum(waited for _, waited in counts)

    def calls(self, metric: str) -> Counter[str]:
        return sum((sidecar.calls(metric) for sidecar in self.sidecars), Counter())


class LogCount:
    """n `event` records about `target` in the delivery log: which node wrote each, and the
    first and last `at_ms` (kpd's clock: fine for a rate, never used for lateness)."""

    def __init__(
        self, bootstrap: str, topic: str, event: str, target: str, n: int, timeout_s: float
    ) -> None:
        c = consumer(bootstrap, topic)
        self.nodes: Counter[str] = Counter()
        self.first_ms, self.last_ms = 2**63, 0
        deadline = time.monotonic() + timeout_s
        while sum(self.nodes.values()) < n and time.monotonic() < deadline:
            for m in c.consume(5000, 0.2):
                if m.error() is None:
                    record = orjson.loads(m.value())
                    if record["event"] == event and record["target"] == target:
                        self.nodes[record["node"]] += 1
                        self.first_ms = min(self.first_ms, record["at_ms"])
                        self.last_ms = max(self.last_ms, record["at_ms"])
        c.close()
        self.count = sum(self.nodes.values())

    def rate(self) -> float:
        return self.count * 1000 / max(self.last_ms - self.first_ms, 1)


def pop_ack_client(
    url: str, group: str, topic: str, total: int, acked: Any, stop_at: float, out: Any
) -> None:
    """Pop 100 at a time and ack them, until the clients together acked `total` (or time is up);
    report when this client's last ack was answered."""
    last = time.monotonic()
    with http_client(url) as http:
        while acked.value < total and time.monotonic() < stop_at:
            body = {"max_messages": 100, "wait_ms": 200}
            messages = http.post(f"/v1/groups/{group}/topics/{topic}/pop", json=body).json()
            receipts = [m["receipt"] for m in messages.get("messages", [])]
            if receipts:
                answer = http.post(f"/v1/groups/{group}/ack", json={"receipts": receipts})
                settled = sum(r["status"] == "acked" for r in answer.json()["results"])
                last = time.monotonic()
                with acked.get_lock():
                    acked.value += settled
    out.put(last)


def pop_and_ack(urls: list[str], group: str, topic: str, n: int) -> tuple[int, float]:
    """4 client processes pop 100 at a time and ack, until n are acked (or 300 s passed), client
    i through `urls[i % len(urls)]`: how many were, in how many seconds until the last ack was
    answered."""
    started = time.monotonic()
    out: multiprocessing.Queue = multiprocessing.Queue()
    counter = multiprocessing.Value("q", 0)
    clients = [
        multiprocessing.Process(
            target=pop_ack_client,
            args=(urls[i % len(urls)], group, topic, n, counter, started + 300, out),
        )
        for i in range(4)
    ]
    for client in clients:
        client.start()
    last = max(out.get() for _ in clients)
    for client in clients:
        client.join()
    return counter.value, last - started


def schedules(target: str, prefix: str, n: int, due_ms: int) -> Iterator[tuple[bytes, list]]:
    """Buffer records keyed by their id: on the buffer partition of their shard (no re-keying)."""
    for i in range(n):
        sid = f"{prefix}-{i}".encode()
        control = [("kpd-target", target.encode()), ("kpd-deliver-at", str(due_ms).encode())]
        yield sid, [*control, ("kpd-id", sid)]


def warm_up(url: str, group: str, topic: str) -> int:
    """Pop and ack until one message came (every shard reads the topic); how many were acked.
    An unacked one would come back only after its lease, so the clients could not finish."""
    deadline = time.monotonic() + 60
    with http_client(url) as http:
        while time.monotonic() < deadline:
            answer = http.post(f"/v1/groups/{group}/topics/{topic}/pop",
                               json={"max_messages": 1, "wait_ms": 2000})  # fmt: skip
            receipts = [m["receipt"] for m in answer.json().get("messages", [])]
            if receipts:
                http.post(f"/v1/groups/{group}/ack", json={"receipts": receipts}).raise_for_status()
                return len(receipts)
            print(f"  warm-up pop: {answer.status_code} {answer.text[:200]}")
            time.sleep(0.5)
    raise RuntimeError("no message popped within 60 s")


class CpuSnapshot(NamedTuple):
    """CPU seconds so far of each worker (with its librdkafka threads' part), and of: their
    standbys (part of the workers'), the broker, and steal, time this VM's cores were ready to
    run and the host ran something else (`/proc/stat`), a cost of the machine, not of the
    processes measured. Also the machine's idle seconds (idle and iowait, all cores) and the time
    (monotonic): what CPU the machine had left, which a worker more could have used. Taken from
    files, not over HTTP: a capped worker busy with a burst took seconds to answer /metrics, and
    a phase measured from its answer started late."""

    workers: WorkerCpu
    others: np.ndarray
    idle: tuple[float, float]  # the machine's idle core-seconds so far, and when

    @classmethod
    def take(cls, sidecar: Sidecar | Fleet, broker: int) -> CpuSnapshot:
        with open("/proc/stat") as stat:
            ticks = [int(field) / os.sysconf("SC_CLK_TCK") for field in stat.readline().split()[1:]]
        workers, broker_s = sidecar.cpu(), process_cpu_s(broker)
        others = np.array([sidecar.standby_cpu_s(), broker_s, ticks[7]])  # ticks[7]: steal
        return cls(workers, others, (ticks[3] + ticks[4], time.monotonic()))

    def split(self, later: CpuSnapshot, n: int) -> str:
        """Each worker's CPU per 1,000 records (in brackets, librdkafka's threads' part of it),
        the standbys' part of it, the broker's and steal, from this snapshot to `later`."""
        per_k = self._per_k(later, n)
        # To 0.001: a hot standby's whole part is about 0.01 of a core-second per 1,000.
        kpd = " + ".join(f"{c:.3f} ({rdk:.3f})" for c, rdk in per_k)
        total = sum(c for c, _ in per_k)
        standby, broker, steal = (later.others - self.others) * 1000 / n
        idle_s, wall_s = (b - a for a, b in zip(self.idle, later.idle, strict=True))
        return (
            f"kpd {kpd} = {total:.3f} (standby {standby:.3f}), broker {broker:.3f}, "
            f"steal {steal:.3f} core-s/1k; machine idle {idle_s / wall_s:.2f} cores"
        )

    def kpd_per_k(self, later: CpuSnapshot, n: int) -> float:
        """All workers' CPU seconds per 1,000 records, from this snapshot to `later`."""
        return sum(c for c, _ in self._per_k(later, n))

    def _per_k(self, later: CpuSnapshot, n: int) -> list[list[float]]:
        """Each worker's (CPU, librdkafka's part of it) seconds per 1,000 records."""
        return [
            [(b - a) * 1000 / n for a, b in zip(self.workers.get(p, (0.0, 0.0)), now, strict=True)]
            for p, now in sorted(later.workers.items())
        ]


def number_list(text: str) -> list[int]:
    """`1,2,4` -> [1, 2, 4]; empty -> [] (skip that part)."""
    return [int(x) for x in text.split(",") if x]


def kpd_setting(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value
