"""Scale-out benchmark: worker processes, failover by kill, takeover against pop-state size.

    .venv/bin/python bench/scale.py                       # local broker under a temp folder
    .venv/bin/python bench/scale.py --workers 1,2 --kills 10 --pop-state 10000,1000000

Prints, in one run on one broker, after uncounted raw loops and mixed phases (`bench/delay.py`)
have run until the fresh broker's JIT compiler is quiet (`bench/broker_jit.py`, `--warm-up-s`):
  * for 1, 2 and 4 worker processes of one `kpd run` (8 shards): delay ingest (schedules/s),
    burst drain (deliveries/s) and pop+ack at batch 100 (msgs/s), as ratios to 1 worker (the
    latest 1-worker run: `--workers 1,2,1,2` pairs); the CPU split (each kpd process, with its
    librdkafka threads' part, their standbys' part, the broker, and the machine's steal,
    core-seconds per 1,000 records; the burst's from its due instant on, the wait before it
    apart) and each worker's share of the work (from the delivery log's `node`); the burst's
    delay commits; and the fixed cost: each process's CPU over 10 s with nothing to do, after
    the pop phase;
  * failover: SIGKILL of a sidecar under a steady due load, 2 sidecars with the broker's stock
    session timeout (6 s): time until the killed sidecar's shards deliver again, p50 and max;
  * takeover: the time from SIGKILL of a pop leader to the first pop answered by its standby,
    with 10k and with 1M records already in the pop-state topic; and with 1 and 100 groups
    holding leases (`--takeover-groups`), until every group's first pop.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import numpy as np
import orjson
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from delay import (  # noqa: E402
    consumer,
    create_target,
    create_topic,
    now_ms,
    produce_fast,
    read_deliveries,
    warm_up_broker,
)

from bench import broker_jit  # noqa: E402
from bench.cpu_cap import CpuCaps  # noqa: E402
from devtools.broker_for_tests import broker_for_tests  # noqa: E402
from devtools.local_sidecar import (  # noqa: E402
    SidecarProcess,
    broker_pid,
    isolated_env,
    process_cpu_s,
    thread_cpu_s,
)
from foundation.shards import ShardMap  # noqa: E402
from kpd_client.client import CONNECTION_LIMITS  # noqa: E402
from revive.ledger import Outcome  # noqa: E402
from revive.records import AckRecord, CheckpointRecord, pack_batch  # noqa: E402

SHARDS = 8
IDLE_S = 10.0  # how long the processes are watched doing nothing, for their fixed cost
SETTLE_S = 10.0  # after a sidecar is ready: standbys catching up, groups settling
FORWARDED, ANSWERED = "kpd_pop_forwarded_total", "kpd_pop_request_seconds_count"
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
        from the workers' shared metrics folder; one worker alone has none, nor a standby that
        follows anything."""
        pids = self.worker_pids()
        if len(pids) < 2:
            return 0.0
        environ = Path(f"/proc/{pids[0]}/environ").read_bytes().split(b"\0")
        folder = next(e.split(b"=", 1)[1] for e in environ if e.startswith(MULTIPROC))
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=folder.decode())
        return sum(
            sample.value
            for family in registry.collect()
            for sample in family.samples
            if sample.name == "kpd_standby_cpu_seconds_total"
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


def pop_and_ack(url: str, group: str, topic: str, n: int) -> tuple[int, float]:
    """4 client processes pop 100 at a time and ack, until n are acked (or 300 s passed): how
    many were, in how many seconds until the last ack was answered."""
    started = time.monotonic()
    out: multiprocessing.Queue = multiprocessing.Queue()
    counter = multiprocessing.Value("q", 0)
    clients = [
        multiprocessing.Process(
            target=pop_ack_client, args=(url, group, topic, n, counter, started + 300, out)
        )
        for _ in range(4)
    ]
    for client in clients:
        client.start()
    last = max(out.get() for _ in clients)
    for client in clients:
        client.join()
    return counter.value, last - started


# -- workers ---------------------------------------------------------------------------------


def schedules(target: str, prefix: str, n: int, due_ms: int) -> Iterator[tuple[bytes, list]]:
    """Buffer records keyed by their id: on the buffer partition of their shard (no re-keying)."""
    for i in range(n):
        sid = f"{prefix}-{i}".encode()
        control = [("kpd-target", target.encode()), ("kpd-deliver-at", str(due_ms).encode())]
        yield sid, [*control, ("kpd-id", sid)]


def _idle(sidecar: Sidecar, broker: int) -> tuple[list[float], float]:
    """What each worker process and the broker burn over IDLE_S with nothing to do, in cores."""
    cpu0, broker0 = sidecar.cpu(), process_cpu_s(broker)
    time.sleep(IDLE_S)
    workers = [
        (c - cpu0.get(p, (0.0, 0.0))[0]) / IDLE_S for p, (c, _) in sorted(sidecar.cpu().items())
    ]
    return workers, (process_cpu_s(broker) - broker0) / IDLE_S


def one_run(
    bootstrap: str,
    admin: AdminClient,
    workers: int,
    n: int,
    home: Path,
    caps: CpuCaps,
    **settings: str,
) -> dict:
    namespace = f"bench-scale-{uuid.uuid4().hex[:6]}"
    folder = home / f"w{workers}-{namespace}"  # `--workers 1,2,1,2` runs 1 worker twice
    sidecar = Sidecar(bootstrap, folder, namespace, "s", workers=str(workers), **settings)
    sidecar.launch(timeout_s=300)
    broker = broker_pid()
    log = sidecar.env["KPD_DELIVERY_LOG_TOPIC"]
    result: dict = {"workers": workers}
    try:
        if caps.cores:
            for pid in sidecar.worker_pids():
                caps.cap(pid)
        # The fixed cost of a fresh sidecar: every shard led and followed, nothing to do.
        time.sleep(SETTLE_S)
        result["idle_fresh"], result["idle_fresh_broker"] = _idle(sidecar, broker)
        # Ingest: n far-future schedules keyed by id, on the buffer partition of their shard.
        target = create_topic(admin, f"bench-scale-t-{uuid.uuid4().hex[:6]}")
        buffer = sidecar.env["KPD_BUFFER_TOPIC"]
        due = now_ms() + 3_600_000
        cpu0 = CpuSnapshot.take(sidecar, broker)
        produce_fast(bootstrap, buffer, schedules(target, "i", n, due))
        ingested = LogCount(bootstrap, log, "scheduled", target, n, 600)
        result["ingest"] = ingested.rate()
        result["ingest_cpu"] = cpu0.split(CpuSnapshot.take(sidecar, broker), n)
        result["ingest_share"] = ingested.nodes
        # Burst: n due at one instant, on a target of its own with the broker's clock.
        # Due once all of it is scheduled: at the ingest rate just measured, with room to spare.
        # Whether it was is read from the delivery log (kpd's counters may miss a step whose
        # commit answered late), and so is who delivered it.
        burst_target = create_target(admin, f"bench-scale-b-{uuid.uuid4().hex[:6]}")
        burst_due = now_ms() + int(n / result["ingest"] * 1500) + 8_000
        produce_fast(bootstrap, buffer, schedules(burst_target, "b", n, burst_due))
        scheduled = LogCount(bootstrap, log, "scheduled", burst_target, n, 600)
        result["burst_valid"] = scheduled.count == n and scheduled.last_ms < burst_due
        # The CPU of the wait (the idle rate, and the wheel loading the burst WINDOW_MS ahead),
        # then of the drain from the due instant on, apart.
        cpu0 = CpuSnapshot.take(sidecar, broker)
        time.sleep(max(burst_due - now_ms(), 0) / 1000)
        cpu1, commits0 = CpuSnapshot.take(sidecar, broker), sidecar.delay_commits()
        result["burst_wait_cpu"] = cpu0.split(cpu1, n)
        rows = read_deliveries(bootstrap, burst_target, n, 600)
        result["burst"] = len(rows) / max((rows[:, 1].max() - burst_due) / 1000, 1e-3)
        result["burst_cpu"] = cpu1.split(CpuSnapshot.take(sidecar, broker), n)
        count, waited = (b - a for a, b in zip(commits0, sidecar.delay_commits(), strict=True))
        result["burst_commits"] = (
            f"{count * 1000 / n:.1f} per 1,000, {waited / count * 1000:.1f} ms"
        )
        result["burst_share"] = LogCount(bootstrap, log, "delivered", burst_target, n, 120).nodes
        # Pop + ack at batch 100 from 4 client processes, over the shared port.
        topic = create_topic(admin, f"bench-scale-p-{uuid.uuid4().hex[:6]}", SHARDS)
        produce_fast(bootstrap, topic, ((f"p-{i}".encode(), []) for i in range(n)))
        group = f"g-{uuid.uuid4().hex[:6]}"
        n_pop = n - warm_up(sidecar.url, group, topic)
        cpu0 = CpuSnapshot.take(sidecar, broker)
        forwarded0, answered0 = sidecar.calls(FORWARDED), sidecar.calls(ANSWERED)
        acked, seconds = pop_and_ack(sidecar.url, group, topic, n_pop)
        result["pop"] = acked / seconds
        result["pop_cpu"] = cpu0.split(CpuSnapshot.take(sidecar, broker), acked)
        result["pop_share"] = LogCount(bootstrap, log, "delivered", topic, acked, 120).nodes
        result["pop_forwarded"] = dict(sidecar.calls(FORWARDED) - forwarded0)
        answered = sidecar.calls(ANSWERED) - answered0
        result["pop_calls"] = {call: answered[call] * 1000 / acked for call in ("pop", "ack")}
        # The fixed cost again, once a group is read.
        result["idle"], result["idle_broker"] = _idle(sidecar, broker)
        result["throttled_s"] = caps.throttled_s()
    finally:
        sidecar.stop()
        caps.release()
    return result


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
    processes measured. Taken from files, not over HTTP: a capped worker busy with a burst took
    seconds to answer /metrics, and a phase measured from its answer started late."""

    workers: WorkerCpu
    others: np.ndarray

    @classmethod
    def take(cls, sidecar: Sidecar, broker: int) -> CpuSnapshot:
        with open("/proc/stat") as stat:
            steal_s = int(stat.readline().split()[8]) / os.sysconf("SC_CLK_TCK")
        workers, broker_s = sidecar.cpu(), process_cpu_s(broker)
        return cls(workers, np.array([sidecar.standby_cpu_s(), broker_s, steal_s]))

    def split(self, later: CpuSnapshot, n: int) -> str:
        """Each worker's CPU per 1,000 records (in brackets, librdkafka's threads' part of it),
        the standbys' part of it, the broker's and steal, from this snapshot to `later`."""
        per_k = [
            [(b - a) * 1000 / n for a, b in zip(self.workers.get(p, (0.0, 0.0)), now, strict=True)]
            for p, now in sorted(later.workers.items())
        ]
        # To 0.001: a hot standby's whole part is about 0.01 (BENCHMARKS.md, 2026-11-28 09:14).
        kpd = " + ".join(f"{c:.3f} ({rdk:.3f})" for c, rdk in per_k)
        total = sum(c for c, _ in per_k)
        standby, broker, steal = (later.others - self.others) * 1000 / n
        return (
            f"kpd {kpd} = {total:.3f} (standby {standby:.3f}), broker {broker:.3f}, "
            f"steal {steal:.3f} core-s/1k"
        )


# -- failover --------------------------------------------------------------------------------


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


# -- main --------------------------------------------------------------------------------------


def run(bootstrap: str, args: argparse.Namespace) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    home = Path(tempfile.mkdtemp(prefix="kpd-bench-scale-"))
    print(f"broker {bootstrap}; files in {home}; {os.cpu_count()} cores")
    broker = broker_pid()
    if args.warm_up_s > 0:  # or the 1-worker run, the base of every ratio, shares the cores with it
        warm_up_broker(bootstrap, admin, home / "warm-up", SHARDS, broker, args.warm_up_s)
    base: dict = {}
    for workers in args.workers:
        jit = broker_jit.CompilerMeter(broker)
        caps = CpuCaps(args.worker_cpu, int(args.cpu_period_ms * 1000))
        r = one_run(bootstrap, admin, workers, args.n, home, caps, **args.setting)
        # Ratios are to the latest 1-worker run: this machine's speed drifts by up to a fifth
        # within minutes, so `--workers 1,2,1,2` gives pairs measured close together.
        base = r if workers == 1 or not base else base
        at = time.strftime("%H:%M:%S", time.gmtime())
        load = os.getloadavg()[0]
        print(
            f"\n== {workers} worker(s), {SHARDS} shards, {at} UTC, load {load:.1f}, "
            f"settings {args.setting}; {jit.text()}",
            flush=True,
        )
        if args.worker_cpu:
            print(
                f"  each worker capped at {args.worker_cpu} cores per {args.cpu_period_ms} ms: "
                f"held back {r['throttled_s']:.1f} s in all by its cap",
                flush=True,
            )
        for name in ("ingest", "burst", "pop"):
            print(
                f"{name:7s} {r[name]:>10,.0f}/s  x{r[name] / base[name]:.2f} of 1 worker  "
                f"cpu {r[name + '_cpu']}  shares {dict(r[name + '_share'])}",
                flush=True,
            )
        print(f"  the burst's wait before its due time: cpu {r['burst_wait_cpu']}", flush=True)
        print(f"  the burst's delay commits: {r['burst_commits']} each", flush=True)
        print(f"  pop calls forwarded to another worker: {r['pop_forwarded']}", flush=True)
        per = ", ".join(f"{call} {count:.1f}" for call, count in r["pop_calls"].items())
        print(f"  calls a shard's leader answered per 1,000 messages: {per}", flush=True)
        for when, key in (("before the ingest", "idle_fresh"), ("after the pop phase", "idle")):
            idle = " + ".join(f"{c:.3f}" for c in r[key])
            print(
                f"  idle for {IDLE_S:.0f} s {when}: kpd {idle} = {sum(r[key]):.3f}, "
                f"broker {r[key + '_broker']:.3f} cores",
                flush=True,
            )
        if not r["burst_valid"]:
            print("  !! the burst was not all scheduled before its due time", flush=True)
    if args.kills:
        times = failover(bootstrap, admin, args.kills, home, args.failover_workers)
        print(
            f"\nfailover after SIGKILL ({len(times)} kills, {args.failover_workers} worker(s) "
            "per sidecar, stock 6 s session; until every shard of the killed one delivered): p50 "
            f"{np.percentile(times, 50):.2f} s, max {max(times):.2f} s; all {times}"
        )
    for records in args.pop_state:
        first, _, _, cold = takeover(bootstrap, admin, records, home)
        print(
            f"takeover with {records:,} pop-state records: {first:.2f} s to the standby's "
            f"first pop (the first leader's cold start: {cold:.1f} s)"
        )
    for groups in args.takeover_groups:
        first, median, last, _ = takeover(bootstrap, admin, 10_000, home, groups)
        print(
            f"takeover with {groups} groups holding leases: {first:.2f} s to the first group's "
            f"first pop, {median:.2f} s to the median group's, {last:.2f} s until every group "
            "had one (each group long-polling)"
        )


def _numbers(text: str) -> list[int]:
    """`1,2,4` -> [1, 2, 4]; empty -> [] (skip that part)."""
    return [int(x) for x in text.split(",") if x]


def _setting(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=_numbers, default=[1, 2, 4])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--pop-state", type=_numbers, default=[10_000, 1_000_000])
    parser.add_argument("--takeover-groups", type=_numbers, default=[1, 100])
    parser.add_argument("--failover-workers", type=int, default=1, help="workers per sidecar")
    broker_jit.add_argument(parser)
    parser.add_argument(
        "--worker-cpu",
        type=float,
        default=0.0,
        metavar="CORES",
        help="cap each worker process at this many cores (a cgroup each; root): what a worker "
        "adds where the machine has CPU left for it (bench/cpu_cap.py)",
    )
    parser.add_argument(
        "--cpu-period-ms",
        type=float,
        default=100.0,
        metavar="MS",
        help="the caps' period (default the kernel's 100 ms): a capped worker runs its share of "
        "each period, then waits for the next",
    )
    parser.add_argument(
        "--set",
        dest="setting",
        type=_setting,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a kpd setting for the 1/2/4-worker runs, e.g. standby_schedules=next",
    )
    args = parser.parse_args()
    args.setting = dict(args.setting)
    home = ROOT / ".kpd" / "bench-kafka"
    with broker_for_tests(os.environ, home) as bootstrap:
        run(bootstrap, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
