"""Java kafka-clients, kafkajs and kcat produce a delayed record with the header contract and
read the delivery back: key, value, user headers, `kpd-id` and `kpd-deliver-at`, never early."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from kafka_helpers import now_ms, unique

HERE = Path(__file__).resolve().parent
DELAY_MS = 1500  # long enough that an early delivery would show
CLIENT_TIMEOUT_S = 120


def run_client(command: list[str], env: dict[str, str] | None = None) -> dict:
    """Run a client program; its last stdout line is the delivered record as JSON."""
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S, env=env, check=False
    )
    assert result.returncode == 0, f"{command[0]} failed:\n{result.stderr[-3000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def check_delivered(
    record: dict, *, client: str, schedule_id: str, deliver_at: int, target: str
) -> None:
    headers = dict(record["headers"])
    assert (record["key"], record["value"]) == (f"{client}-key", f"{client}-value")
    assert headers == {
        "trace": f"{client}-trace",
        "kpd-id": schedule_id,
        "kpd-deliver-at": str(deliver_at),
    }, f"headers seen by {client} on {target}"
    assert record["timestamp"] >= deliver_at, "delivered before its due time"


def test_java_kafka_clients(delay_sidecar, new_topic, kafka_bootstrap, release, java) -> None:
    target, schedule_id, deliver_at = new_topic("java"), unique("java"), now_ms() + DELAY_MS
    record = run_client(
        [java, "-cp", release.classpath(), str(HERE / "DelayedRoundTrip.java"), kafka_bootstrap,
         delay_sidecar.env["KPD_BUFFER_TOPIC"], target, schedule_id, str(deliver_at)]
    )  # fmt: skip
    check_delivered(
        record, client="java", schedule_id=schedule_id, deliver_at=deliver_at, target=target
    )


def test_kafkajs(delay_sidecar, new_topic, kafka_bootstrap, kafkajs_modules, admin) -> None:
    node = shutil.which("node")
    assert node, "Node.js is needed for the kafkajs check (apt-get install nodejs)"
    target, schedule_id, deliver_at = new_topic("js"), unique("js"), now_ms() + DELAY_MS
    try:
        record = run_client(
            [node, str(HERE / "delayed_round_trip.js"), kafka_bootstrap,
             delay_sidecar.env["KPD_BUFFER_TOPIC"], target, schedule_id, str(deliver_at)],
            env={**os.environ, "NODE_PATH": str(kafkajs_modules)},
        )  # fmt: skip
    finally:  # kafkajs reads through a group: leave none behind
        group = f"kpd-compat-{schedule_id}"
        for future in admin.delete_consumer_groups([group]).values():
            future.exception(timeout=30)  # absent when the client never joined: fine
    check_delivered(
        record, client="js", schedule_id=schedule_id, deliver_at=deliver_at, target=target
    )


def test_kcat(delay_sidecar, new_topic, kafka_bootstrap) -> None:
    kcat = shutil.which("kcat")
    assert kcat, "kcat is needed for this check (apt-get install kcat)"
    target, schedule_id, deliver_at = new_topic("kcat"), unique("kcat"), now_ms() + DELAY_MS
    produce = [
        kcat, "-P", "-b", kafka_bootstrap, "-t", delay_sidecar.env["KPD_BUFFER_TOPIC"],
        "-k", "kcat-key", "-H", f"kpd-target={target}", "-H", f"kpd-deliver-at={deliver_at}",
        "-H", f"kpd-id={schedule_id}", "-H", "trace=kcat-trace",
    ]  # fmt: skip
    sent = subprocess.run(produce, input="kcat-value\n", capture_output=True, text=True, timeout=60)
    assert sent.returncode == 0, sent.stderr
    envelope = run_client(
        [kcat, "-C", "-b", kafka_bootstrap, "-t", target, "-o", "beginning", "-c", "1", "-J",
         "-X", "isolation.level=read_committed"]
    )  # fmt: skip
    flat = envelope["headers"]
    record = {
        "key": envelope["key"],
        "value": envelope["payload"],
        "timestamp": envelope["ts"],
        "headers": list(zip(flat[::2], flat[1::2], strict=True)),
    }
    check_delivered(
        record, client="kcat", schedule_id=schedule_id, deliver_at=deliver_at, target=target
    )
