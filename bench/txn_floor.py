"""What one Kafka transaction costs a client, with nothing of kpd around it: the floor under
every pop, ack and delivery step that commits a transaction of its own.

One confluent-kafka producer loops begin, produce, (flush,) commit on a local broker, with 2
records a transaction (a pop step's state record and log event) and with 200. It prints the
process's CPU per transaction (every thread, librdkafka's included), the wall time and the
context switches per transaction (getrusage: voluntary and not), for a few producer settings.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.delay_load import create_topic  # noqa: E402
from devtools.broker_for_tests import broker_for_tests  # noqa: E402

WARM_UP = 200  # transactions before the count: the broker's first ones are slower
VARIANTS: list[tuple[dict[str, Any], bool]] = [
    ({"linger.ms": 1}, True),  # kpd's producers: linger 1 ms, a flush before the commit
    ({"linger.ms": 1}, False),
    ({"linger.ms": 0}, False),
    ({"linger.ms": 5}, False),
]


def switches() -> int:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nvcsw + usage.ru_nivcsw


def loop(bootstrap: str, topics: tuple[str, str], config: dict[str, Any], flush: bool,
         records: int, count: int) -> str:  # fmt: skip
    producer = Producer({"bootstrap.servers": bootstrap, **config,
                         "transactional.id": f"bench-txn-{uuid.uuid4().hex}"})  # fmt: skip
    producer.init_transactions(30)
    state, log = topics
    for n in range(WARM_UP + count):
        if n == WARM_UP:
            cpu, wall, switched = time.process_time(), time.monotonic(), switches()
        producer.begin_transaction()
        for _ in range(records // 2):
            producer.produce(state, b"s" * 100, partition=0)
            producer.produce(log, b"l" * 200, partition=0)
        if flush:
            producer.flush(30)
        producer.commit_transaction(30)
    cpu_us = (time.process_time() - cpu) / count * 1e6
    wall_ms = (time.monotonic() - wall) / count * 1e3
    per = (switches() - switched) / count
    return (f"{records:>3} records, {config} flush={flush}: client CPU {cpu_us:.0f} us, "
            f"wall {wall_ms:.2f} ms, {per:.1f} context switches per transaction")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=1000)
    args = parser.parse_args()
    with broker_for_tests(os.environ, ROOT / ".kpd" / "bench-kafka") as bootstrap:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topics = (create_topic(admin, f"bench-txn-state-{uuid.uuid4().hex[:6]}"),
                  create_topic(admin, f"bench-txn-log-{uuid.uuid4().hex[:6]}"))  # fmt: skip
        for records in (2, 200):
            for config, flush in VARIANTS if records == 2 else VARIANTS[:1]:
                print(loop(bootstrap, topics, config, flush, records, args.transactions),
                      flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
