"""What a sidecar costs when little happens: at rest, holding parked long polls, and at a trickle.

    .venv/bin/python bench/idle.py                       # its own broker under .kpd/bench-kafka
    KPD_BOOTSTRAP=127.0.0.1:9092 .venv/bin/python bench/idle.py --seconds 20

One `kpd run` with kpd's defaults (8 shards, one worker per core), one user topic. CPU comes from
/proc (the sidecar's supervisor and workers, the broker), phase by phase:
  * the broker alone, before the sidecar starts: the peer of every broker figure below;
  * idle: the sidecar with one group that has popped the topic once;
  * parked: 4 long polls (wait_ms 20000) waiting on the empty topic;
  * pop: 100 messages/s produced, popped (max 10, long polls) and acked by 4 clients, with the
    time from each message's CreateTime to its client and the calls the workers sent on to each
    other per message;
  * delay: 100 schedules/s on the buffer topic, each due 1 s later; lateness at the broker (the
    target's LogAppendTime minus the due time);
  * share: the peer of the pop phase, a Kafka share group of 4 members ACCEPTing the same
    trickle (commit_sync after each poll), after the sidecar stopped.
Before the phases, the pop trickle runs uncounted until the broker's JIT compiler is quiet
(`bench/broker_jit.py`, `--warm-up-s`): a fresh broker compiles for minutes under its first load.
Each line gives kpd's cores and how often its threads woke, the broker's cores, and the broker's
above its own idle.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import broker_jit  # noqa: E402
from bench.delay_load import (  # noqa: E402
    VALUE,
    consumer,
    create_target,
    create_topic,
    now_ms,
)
from bench.pop_load import add_leases_argument  # noqa: E402
from bench.runs import on_broker  # noqa: E402
from bench.share_groups import configure_share_group, share_consumer  # noqa: E402
from devtools.local_sidecar import (  # noqa: E402
    SidecarProcess,
    broker_pid,
    isolated_env,
    process_cpu_s,
)
from foundation.kafka_clients import consume_ready  # noqa: E402

PARTITIONS = 8
CLIENTS = 4
RATE = 100
GROUP = "bench-idle"


class Sidecar(SidecarProcess):
    def __init__(self, bootstrap: str, home: Path, workers: int, leases: str) -> None:
        namespace = f"bench-{uuid.uuid4().hex[:6]}"
        env = isolated_env(
            bootstrap, "idle", home / "data", namespace, log_level="WARNING", shards="8",
            workers=str(workers), group_defaults__leases=leases,
        )  # fmt: skip
        super().__init__(env, home / "sidecar.log")
        self.buffer = env["KPD_BUFFER_TOPIC"]

    def labelled(self, family: str) -> dict[str, float]:
        """The samples of a counter family by their labels, summed over the workers."""
        found: dict[str, float] = {}
        for line in httpx.get(f"{self.url}/metrics", timeout=10).text.splitlines():
            if line.startswith(f"{family}{{"):
                labels, value = line[len(family) :].rsplit(" ", 1)
                found[labels] = found.get(labels, 0.0) + float(value)
        return found

    def threads(self) -> str:
        """How many threads each worker runs, and how many librdkafka clients (rdk:main)."""
        counts = []
        for pid in self.worker_pids():
            names = [(t / "comm").read_text().strip() for t in Path(f"/proc/{pid}/task").iterdir()]
            counts.append(f"{len(names)} threads, {names.count('rdk:main')} Kafka clients")
        return "; ".join(counts)


class Meter:
    """CPU of the sidecar and the broker over one phase."""

    def __init__(self, sidecar: Sidecar | None, broker: int) -> None:
        self._sidecar, self._broker = sidecar, broker
        self._kpd0 = sidecar.cpu_s() if sidecar is not None else 0.0
        self._wakes0 = sidecar.wakes() if sidecar is not None else 0
        self._broker0, self._wall0 = process_cpu_s(broker), time.monotonic()
        self._jit0 = broker_jit.compiler_cpu_s(broker)

    def cores(self) -> tuple[float, float, float]:
        """(kpd's cores, the broker's, seconds) since the meter was made."""
        wall = time.monotonic() - self._wall0
        kpd = (self._sidecar.cpu_s() - self._kpd0) if self._sidecar is not None else 0.0
        return kpd / wall, (process_cpu_s(self._broker) - self._broker0) / wall, wall

    def wakes_per_s(self) -> float:
        """How often kpd's threads woke per second since the meter was made."""
        if self._sidecar is None:
            return 0.0
        return (self._sidecar.wakes() - self._wakes0) / (time.monotonic() - self._wall0)

    def jit_cores(self) -> float:
        """The broker's JIT compiler's share of its cores (a fresh broker compiles for minutes)."""
        return (broker_jit.compiler_cpu_s(self._broker) - self._jit0) / (
            time.monotonic() - self._wall0
        )


def measured(
    name: str, sidecar: Sidecar | None, broker: int, alone: float, seconds: float,
    during: Callable[[float], str] = lambda _: "",
) -> float:  # fmt: skip
    """Run `during(stop_at)` (or wait) for `seconds`, print the phase's line; kpd's cores."""
    meter = Meter(sidecar, broker)
    extra = during(time.monotonic() + seconds)
    while time.monotonic() < meter._wall0 + seconds:
        time.sleep(0.1)
    kpd, broker_cores, wall = meter.cores()
    wakes = f" ({meter.wakes_per_s():.0f} wakes/s)" if sidecar is not None else ""
    print(
        f"{name:14s} kpd {kpd:.4f} cores{wakes}, broker {broker_cores:.4f} "
        f"(+{broker_cores - alone:.4f} over its own idle; its JIT {meter.jit_cores():.4f}) "
        f"in {wall:.0f} s{extra}"
    )
    return kpd


def popper(url: str, topic: str, stop_at: float, popped: list[list[int]], ack: bool) -> None:
    """One long-polling client: pop up to 10 (waiting up to 20 s), ack what came, until
    `stop_at`. Each pop's answer adds the ms from each message's CreateTime to its arrival."""
    with httpx.Client(base_url=url, timeout=60) as http:
        while time.monotonic() < stop_at:
            wait_ms = int(min(20.0, max(stop_at - time.monotonic(), 0.1)) * 1000)
            body = {"max_messages": 10, "wait_ms": wait_ms}
            messages = http.post(f"/v1/groups/{GROUP}/topics/{topic}/pop", json=body).json()
            got = messages.get("messages", [])
            popped.append([now_ms() - m["timestamp_ms"] for m in got])
            if got and ack:
                http.post(f"/v1/groups/{GROUP}/ack", json={"receipts": [m["receipt"] for m in got]})


def clients(url: str, topic: str, stop_at: float, ack: bool) -> tuple[list[threading.Thread], list]:
    popped: list[list[int]] = []
    threads = [
        threading.Thread(target=popper, args=(url, topic, stop_at, popped, ack), daemon=True)
        for _ in range(CLIENTS)
    ]
    for thread in threads:
        thread.start()
    return threads, popped


def paced(produce: Callable[[int], None], stop_at: float) -> int:
    """Call `produce(i)` RATE times a second until `stop_at`; how many times."""
    started, sent = time.monotonic(), 0
    while (now := time.monotonic()) < stop_at:
        while sent < int((now - started) * RATE):
            produce(sent)
            sent += 1
        time.sleep(0.002)
    return sent


def forwarded(sidecar: Sidecar) -> Counter[str]:
    """Calls the workers sent on to each other so far (`kpd_pop_forwarded_total`), by call."""
    return Counter(
        {
            name.split('"')[1]: value
            for name, value in sidecar.labelled("kpd_pop_forwarded_total").items()
        }
    )


def pop_trickle(bootstrap: str, sidecar: Sidecar, topic: str, stop_at: float) -> str:
    url = sidecar.url
    before = forwarded(sidecar)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    threads, popped = clients(url, topic, stop_at, ack=True)

    def produce(i: int) -> None:
        producer.produce(topic, VALUE, f"k{i}".encode())
        producer.poll(0)

    sent = paced(produce, stop_at)
    producer.flush(10)
    for thread in threads:
        thread.join(30)
    late = [ms for answer in popped for ms in answer]
    calls = forwarded(sidecar) - before
    between = ", ".join(f"{n / max(len(late), 1):.2f} {call}" for call, n in sorted(calls.items()))
    return (
        f"; {sent} produced, {len(late)} popped and acked in {len(popped)} pops{_latency(late)}; "
        f"calls between workers per message: {between or 'none'}"
    )


def _latency(late: list[int]) -> str:
    """From each message's CreateTime to the client that got it."""
    if not late:
        return ""
    p50, p99 = np.percentile(late, [50, 99])
    return f", CreateTime -> client p50 {p50:.0f} / p99 {p99:.0f} ms"


def share_trickle(bootstrap: str, admin: AdminClient, stop_at: float) -> str:
    """The peer: a share group of CLIENTS members ACCEPTing a trickle of RATE a second."""
    from confluent_kafka import AcknowledgeType

    name = f"bench-idle-share-{uuid.uuid4().hex[:6]}"
    topic = create_topic(admin, name, PARTITIONS)
    configure_share_group(admin, name)
    accepted: list[int] = []

    def member() -> None:
        with share_consumer(bootstrap, name, 10) as c:
            c.subscribe([topic])
            while time.monotonic() < stop_at:
                messages = [m for m in c.poll(0.5) if m.error() is None]
                accepted.extend(now_ms() - m.timestamp()[1] for m in messages)
                for message in messages:
                    c.acknowledge(message, AcknowledgeType.ACCEPT)
                if messages:
                    c.commit_sync(30)

    members = [threading.Thread(target=member, daemon=True) for _ in range(CLIENTS)]
    for thread in members:
        thread.start()
    time.sleep(3)  # the members joined: a share group starts at the latest offset here
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})

    def produce(i: int) -> None:
        producer.produce(topic, VALUE, f"k{i}".encode())
        producer.poll(0)

    cpu0 = time.process_time()
    sent = paced(produce, stop_at)
    producer.flush(10)
    for thread in members:
        thread.join(30)
    members_cpu = time.process_time() - cpu0
    return (
        f"; {sent} produced, {len(accepted)} accepted{_latency(accepted)}; the members and the "
        f"producer (one process) {members_cpu / max(sent, 1) * 1e6:.0f} us of CPU per message"
    )


def delay_trickle(bootstrap: str, admin: AdminClient, buffer: str, stop_at: float) -> str:
    target = create_target(admin, f"bench-idle-due-{uuid.uuid4().hex[:6]}")
    reader = consumer(bootstrap, target)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                         "partitioner": "murmur2_random"})  # fmt: skip

    def produce(i: int) -> None:
        sid = f"idle-{uuid.uuid4().hex}".encode()
        due = str(now_ms() + 1000).encode()
        headers = [("kpd-target", target.encode()), ("kpd-deliver-at", due), ("kpd-id", sid)]
        producer.produce(buffer, VALUE, sid, headers=headers)
        producer.poll(0)

    sent = paced(produce, stop_at)
    producer.flush(10)
    late: list[int] = []
    deadline = time.monotonic() + 20
    while len(late) < sent and time.monotonic() < deadline:
        for m in consume_ready(reader, 1000, 0.2):
            if m.error() is None:
                due = next(int(v) for k, v in m.headers() if k == "kpd-deliver-at")
                late.append(m.timestamp()[1] - due)
    reader.close()
    p50, p99 = np.percentile(late, [50, 99]) if late else (float("nan"),) * 2
    early = sum(x < 0 for x in late)
    return (
        f"; {sent} scheduled, {len(late)} delivered, at the broker p50 {p50:.0f} / p99 "
        f"{p99:.0f} ms late, {early} early"
    )


def run(bootstrap: str, args: argparse.Namespace) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    home = Path(tempfile.mkdtemp(prefix="kpd-bench-idle-"))
    broker = broker_pid()
    time.sleep(args.settle_s)
    alone = Meter(None, broker)
    time.sleep(args.seconds)
    alone_cores = alone.cores()[1]
    print(f"{'broker alone':14s} broker {alone_cores:.4f} cores in {args.seconds:.0f} s")
    sidecar = Sidecar(bootstrap, home, args.workers, args.leases)
    try:
        sidecar.launch(timeout_s=300)
        topic = create_topic(admin, f"bench-idle-{uuid.uuid4().hex[:6]}", PARTITIONS)
        first = Producer({"bootstrap.servers": bootstrap})
        first.produce(topic, VALUE)
        first.flush(10)
        with httpx.Client(base_url=sidecar.url, timeout=60) as http:  # the group's fetchers
            body = {"max_messages": 10, "wait_ms": 10_000}
            got = http.post(f"/v1/groups/{GROUP}/topics/{topic}/pop", json=body).json()
            receipts = [m["receipt"] for m in got["messages"]]
            http.post(f"/v1/groups/{GROUP}/ack", json={"receipts": receipts})
        if args.warm_up_s > 0:
            warm = broker_jit.warm_up(
                broker,
                lambda: pop_trickle(bootstrap, sidecar, topic, time.monotonic() + 5),
                args.warm_up_s,
            )
            print(f"broker warm-up: the pop trickle, not counted: {warm.text()}")
        time.sleep(args.settle_s)
        print(f"sidecar: {sidecar.threads()}")
        common = (broker, alone_cores, args.seconds)

        def parked(stop_at: float) -> str:
            threads, popped = clients(sidecar.url, topic, stop_at, ack=False)
            time.sleep(max(stop_at - time.monotonic(), 0))
            for thread in threads:
                thread.join(30)
            return f"; {len(popped)} pops answered, {sum(map(len, popped))} messages"

        phases: dict[str, tuple[Callable[[float], str], str]] = {
            "idle": (lambda _: "", ""),
            "parked": (parked, ""),
            "pop": (lambda at: pop_trickle(bootstrap, sidecar, topic, at), "message"),
            "delay": (
                lambda at: delay_trickle(bootstrap, admin, sidecar.buffer, at),
                "schedule and delivery",
            ),
        }
        for name in [name for name in args.phases if name != "share"]:  # share: kpd stopped
            during, per = phases[name]
            kpd = measured(name, sidecar, *common, during=during)
            if per:
                print(f"{'':14s} = {kpd / RATE * 1e6:.0f} us of kpd's CPU per {per}")
    finally:
        sidecar.stop()
    if "share" in args.phases:
        measured("share", None, *common, during=lambda at: share_trickle(bootstrap, admin, at))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30, help="length of each phase")
    parser.add_argument("--settle-s", type=float, default=10, help="rest before idle phases")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--phases",
        type=lambda text: text.split(","),
        default=["idle", "parked", "pop", "delay", "share"],
        help="which phases, in this order (idle, parked, pop, delay, share)",
    )
    add_leases_argument(parser)
    broker_jit.add_argument(parser)
    return on_broker(run, parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
