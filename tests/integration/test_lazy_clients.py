"""Clients a role rarely needs are made on first use, against a real broker: until then the role
holds no librdkafka client (each one's threads wake every second or so at rest).

Counted in a process of its own, by its librdkafka main threads (`rdk:main`), so no other test's
client comes or goes meanwhile."""

from __future__ import annotations

import json
import subprocess
import sys

from confluent_kafka import Producer

PROBE = """
import json, sys, time
from pathlib import Path

from foundation.kafka_clients import LazyAdmin
from revive.reader import OffsetReader

def main_threads():
    tasks = Path("/proc/self/task").iterdir()
    return sum((t / "comm").read_text().strip() == "rdk:main" for t in tasks)

def clients():
    # A thread rdk:main has just started (a broker's) bears its name until it names itself:
    # counted once two looks 50 ms apart agree.
    seen = main_threads()
    while True:
        time.sleep(0.05)
        if (now := main_threads()) == seen:
            return now
        seen = now

config, topic = {"bootstrap.servers": sys.argv[1]}, sys.argv[2]
counts = {"start": clients()}
admin, reader = LazyAdmin(config), OffsetReader(config, 10)
counts["made"] = clients()
counts["listed"] = topic in admin.list_topics(timeout=10).topics
counts["admin asked"] = clients()
admin.list_topics(timeout=10)
counts["admin asked again"] = clients()
counts["read"] = [r.value.decode() for r in reader.read({(topic, 0, 1)}).values()]
counts["reader asked"] = clients()
print(json.dumps(counts))
"""


def test_a_lazy_admin_and_an_offset_reader_hold_no_client_until_asked(
    kafka_bootstrap: str, new_topic
) -> None:
    topic = new_topic("lazy")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for value in (b"zero", b"one"):
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0
    ran = subprocess.run(
        [sys.executable, "-c", PROBE, kafka_bootstrap, topic],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    counts = json.loads(ran.stdout.strip().splitlines()[-1])
    assert counts == {
        "start": 0,
        "made": 0,
        "listed": True,
        "admin asked": 1,
        "admin asked again": 1,
        "read": ["one"],
        "reader asked": 2,
    }
