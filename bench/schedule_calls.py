"""Benchmark of a schedule's `POST` (read-your-writes) at its shard's owner and at another sidecar.

    .venv/bin/python bench/schedule_calls.py
    .venv/bin/python bench/schedule_calls.py --calls 500 --rounds 3

Two `kpd run` sidecars (one worker each, 2 shards, so each leads one), one real broker. A `POST
/v1/topics/{t}/messages` with one schedule answers once the index of the sidecar that took the call
shows the schedule: at the owner when its delay leader has ingested it, elsewhere when that
sidecar's standby has also applied the owner's state record. Printed per round, sequential calls
from one client, all for schedules of one shard:
  * the peer: a raw confluent-kafka produce of a record of that size to a topic of its own,
    waited for (what any schedule call costs at least: its record must be on the broker);
  * POST at the shard's owner, and POST at the other sidecar: p50 / p90 / p99 / max in ms.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devtools.broker_for_tests import broker_for_tests  # noqa: E402
from devtools.local_sidecar import SidecarProcess, isolated_env  # noqa: E402
from foundation.shards import ShardMap  # noqa: E402

SHARDS = 2
DELAY_MS = 600_000  # far off: nothing is delivered while the calls are timed


def led(sidecar: SidecarProcess) -> set[int]:
    text = httpx.get(f"{sidecar.url}/metrics", timeout=10).text
    return {int(s) for s in re.findall(r'kpd_shard_leader\{shard="(\d+)"\} 1\.0', text)}


def timed(calls: int, call: Callable[[], None]) -> str:
    took = []
    for _ in range(calls):
        began = time.perf_counter()
        call()
        took.append((time.perf_counter() - began) * 1000)
    p50, p90, p99 = np.percentile(took, [50, 90, 99])
    return f"p50 {p50:5.1f}  p90 {p90:5.1f}  p99 {p99:5.1f}  max {max(took):5.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300, help="calls per measurement")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(f"machine: {platform.node()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    with broker_for_tests(os.environ, ROOT / ".kpd" / "bench-kafka") as bootstrap:
        namespace = f"sc-{uuid.uuid4().hex[:6]}"
        sidecars = []
        for name in "ab":
            home = Path(tempfile.mkdtemp(prefix="kpd-bench-calls-"))
            env = isolated_env(bootstrap, name, home / "data", namespace, log_level="WARNING")
            sidecars.append(SidecarProcess(env, home / "sidecar.log"))
            sidecars[-1].launch(timeout_s=300)
        try:
            run(bootstrap, namespace, sidecars, args)
        finally:
            for sidecar in sidecars:
                sidecar.stop()


def run(
    bootstrap: str, namespace: str, sidecars: list[SidecarProcess], args: argparse.Namespace
) -> None:
    deadline = time.monotonic() + 120
    while not all(led(sidecar) for sidecar in sidecars):  # each leads one shard
        if time.monotonic() > deadline:
            raise TimeoutError("the sidecars did not share the shards")
        time.sleep(0.2)
    target, raw_topic = f"{namespace}.target", f"{namespace}.raw"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    created = admin.create_topics([NewTopic(t, 1, 1) for t in (target, raw_topic)])
    for done in created.values():
        done.result()
    owner, other = sidecars[1], sidecars[0]
    shard = min(led(owner))
    ids = schedule_ids(ShardMap(SHARDS, SHARDS), shard)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for sidecar in sidecars:
        sidecar.wait_ready(timeout_s=120)

    def raw() -> None:
        producer.produce(raw_topic, b"x", next(ids).encode())
        producer.flush(10)

    def post(sidecar: SidecarProcess) -> Callable[[], None]:
        http = httpx.Client(base_url=sidecar.url, timeout=30)
        body = {"value": "x", "delay_ms": DELAY_MS}

        def call() -> None:
            answer = http.post(
                f"/v1/topics/{target}/messages", json={"messages": [{**body, "id": next(ids)}]}
            )
            if answer.status_code != 200 or answer.json()["results"][0]["status"] != "scheduled":
                raise RuntimeError(answer.text)

        return call

    at_owner, elsewhere = post(owner), post(other)
    at_owner()  # untimed: each sidecar's index has caught up on the shard once it answers
    elsewhere()
    for round_ in range(args.rounds):
        for name, call in (("raw produce, waited", raw), ("POST at the owner", at_owner),
                           ("POST at the other", elsewhere)):  # fmt: skip
            print(f"round {round_}: {name:<20} {timed(args.calls, call)}", flush=True)


def schedule_ids(shards: ShardMap, shard: int) -> Iterator[str]:
    while True:
        schedule_id = uuid.uuid4().hex
        if shards.of_key(schedule_id) == shard:
            yield schedule_id


if __name__ == "__main__":
    main()
