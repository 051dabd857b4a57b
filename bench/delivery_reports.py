"""Benchmark of a delay step's writes with and without a delivery report per record.

    .venv/bin/python bench/delivery_reports.py                 # local broker under .kpd
    KPD_BOOTSTRAP=127.0.0.1:9092 .venv/bin/python bench/delivery_reports.py --repeats 20

A delivery writes three records in its step's transaction: the target record (tagged, so a
refusal can be named), its `delivered` state record and its delivery-log event. Measured in this
run, against a real broker, alternating:
  * tracked: a delivery report for every target and state record (a closure, a Message object
    and a Python call each), as every step did before;
  * untracked: no report for the target records and one for 1 in 64 state records, as a step
    does now until one fails (`foundation.transactions.Transaction`, `tracked=False`).
Figures: the CPU time of the thread that produces and commits (where reports are served) per
delivery, and the wall time of a step of --deliveries, medians over --repeats after 2 warm-ups.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from delay_service.writes import POSITION_EVERY  # noqa: E402
from devtools.broker_for_tests import broker_for_tests  # noqa: E402
from foundation.kafka_clients import transactional_producer  # noqa: E402
from foundation.transactions import Transaction  # noqa: E402

WARM_UPS = 2


def one_step(producer: Producer, topics: list[str], deliveries: int, tracked: bool) -> tuple:
    """(thread CPU s, wall s) of one step's writes and commit."""
    noted: list[int] = []

    def written(error: Any, message: Any) -> None:
        noted.append(message.offset())

    every = 1 if tracked else POSITION_EVERY
    started_cpu, started = time.thread_time(), time.perf_counter()
    txn = Transaction(producer, 30, tracked=tracked)
    for i in range(deliveries):
        key = f"id-{uuid.uuid4().hex[:12]}".encode()
        txn.produce(topics[0], key, b"v" * 100, tag=("target", i), headers=[("kpd-id", key)])
        txn.produce(topics[1], key, b"s" * 30, on_delivery=written if i % every == 0 else None)
        txn.produce(topics[2], key, b"l" * 150)
    txn.commit()
    return time.thread_time() - started_cpu, time.perf_counter() - started


def run(bootstrap: str, deliveries: int, repeats: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [f"bench-reports-{uuid.uuid4().hex[:6]}-{n}" for n in range(3)]
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        future.result(timeout=30)
    producer = transactional_producer(
        {"bootstrap.servers": bootstrap}, f"bench-reports-{uuid.uuid4().hex[:6]}"
    )
    producer.init_transactions(30)
    samples: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for _ in range(repeats + WARM_UPS):
        for tracked in (True, False):
            samples[tracked].append(one_step(producer, topics, deliveries, tracked))
    print(f"== {deliveries:,} deliveries per step, {repeats} steps each, alternating ==")
    for tracked, rows in samples.items():
        cpu = statistics.median(r[0] for r in rows[WARM_UPS:]) / deliveries * 1e6
        wall = statistics.median(r[1] for r in rows[WARM_UPS:]) * 1000
        name = "tracked (a report per record)" if tracked else "untracked (1 in 64 state records)"
        print(f"{name:36} {cpu:6.1f} us thread CPU per delivery, {wall:5.0f} ms per step")
    admin.delete_topics(topics)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    with broker_for_tests(os.environ, ROOT / ".kpd" / "bench-kafka") as bootstrap:
        run(bootstrap, args.deliveries, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
