"""The audit on a delivery log written by a real sidecar, plus anomalies injected into it."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Producer
from kafka_helpers import TopicReader, now_ms, wait_for

from kpd_client import KpdClient
from kpd_client.retry import KpdError
from spark.audit import main

pytestmark = pytest.mark.spark


def log_events(bootstrap: str, topic: str, settled: int, popped: int) -> list[dict]:
    """The log's events once `settled` schedules are delivered, cancelled or invalid and
    `popped` pop deliveries are logged."""

    def events(messages: list) -> list[dict]:
        return [json.loads(m.value()) for m in messages]

    def done(messages: list) -> bool:
        finals = ("delivered", "cancelled", "invalid")
        logged = events(messages)
        pops = sum(e["event"] == "delivered" and e.get("group") is not None for e in logged)
        return sum(e["event"] in finals for e in logged) - pops >= settled and pops >= popped

    with TopicReader(bootstrap, topic) as reader:
        what = f"{settled} settled schedules, {popped} pops"
        return events(reader.read_until(done, 60, what))


def _state(kpd: KpdClient, schedule_id: str) -> str | None:
    try:
        return str(kpd.schedule(schedule_id)["state"])
    except KpdError as error:  # 404 until the schedule is ingested
        assert error.status == 404, error
        return None


def test_audit_of_a_real_sidecar_log_with_injected_anomalies(
    spark, sidecar_factory, new_topic, kafka_bootstrap, tmp_path
) -> None:
    sidecar = sidecar_factory("a").start()
    target, overdue_target, jobs = new_topic("audited"), new_topic("overdue"), new_topic("jobs")
    buffer, log_topic = sidecar.env["KPD_BUFFER_TOPIC"], sidecar.env["KPD_DELIVERY_LOG_TOPIC"]
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(28):
        delay = 60_000 if i < 2 else 200 + 20 * i  # s0 and s1 get cancelled before they are due
        producer.produce(
            buffer,
            f"v{i}".encode(),
            headers=[
                ("kpd-target", target.encode()),
                ("kpd-delay-ms", str(delay).encode()),
                ("kpd-id", f"s{i}".encode()),
            ],
        )
    producer.produce(buffer, b"no target", headers=[("kpd-delay-ms", b"10")])
    # Due a minute before it reaches kpd: a minute late end to end, prompt by kpd's own measure.
    overdue = [("kpd-target", overdue_target.encode()), ("kpd-id", b"overdue-1")]
    due_ms = now_ms() - 60_000
    producer.produce(buffer, b"late", headers=[*overdue, ("kpd-deliver-at", str(due_ms).encode())])
    for i in range(3):
        producer.produce(jobs, f"job{i}".encode())
    assert producer.flush(30) == 0
    with KpdClient(sidecar.url) as kpd:
        # Cancels only once scheduled: a cancel that overtook its schedule (another buffer
        # partition) would win without a `scheduled` event, and the counts below would differ.
        for cancelled in ("s0", "s1"):
            wait_for(
                lambda c=cancelled: _state(kpd, c) == "scheduled", 30, f"{cancelled} scheduled"
            )
            producer.produce(buffer, None, headers=[("kpd-cancel", cancelled.encode())])
        assert producer.flush(30) == 0
        popped = []
        while len(popped) < 3:
            popped += kpd.pop("auditors", jobs, max_messages=3, wait_ms=2000)
        kpd.ack("auditors", [m.receipt for m in popped])
    events = log_events(kafka_bootstrap, log_topic, settled=26 + 2 + 1 + 1, popped=3)
    delivered = [e for e in events if e["event"] == "delivered" and e["target"] == target]
    assert len(delivered) == 26

    # Anomalies: a second delivery of s5, an early delivery, a schedule never resolved, garbage.
    now = int(time.time() * 1000)
    early = {"id": "early-x", "target": target, "due_ms": now + 100_000, "enqueued_ms": now,
             "delivery_count": 1, "node": "injected"}  # fmt: skip
    injected = [
        {**(s5 := next(e for e in delivered if e["id"] == "s5")), "at_ms": s5["due_ms"] + 20_000},
        {**early, "event": "scheduled", "at_ms": now},
        {**early, "event": "delivered", "at_ms": now + 1},
        {**early, "id": "missing-x", "event": "scheduled", "due_ms": now - 100_000, "at_ms": now},
    ]
    for event in injected:
        producer.produce(log_topic, json.dumps(event).encode(), key=event["id"].encode())
    producer.produce(log_topic, b"{not json", key=b"garbage")
    assert producer.flush(30) == 0

    out = tmp_path / "audit"
    status = main(["--bootstrap", kafka_bootstrap, "--topic", log_topic, "--out", str(out),
                   "--master", "local[2]", "--grace-ms", "1000",
                   "--late-threshold-ms", "10000"])  # fmt: skip
    assert status == 2  # anomalies over the default thresholds (0) fail the gate
    summary = json.loads((out / "summary.json").read_text())
    # The duplicate of s5 is also late (20 s after its due time, threshold 10 s): late = 1.
    # Pop deliveries (logged with a group, without due time) are neither malformed nor late.
    assert summary["anomalies"] == {"early": 1, "late": 1, "missing": 1, "duplicates": 1,
                                    "malformed": 1}  # fmt: skip
    # End to end, the overdue schedule is late as well; kpd itself dispatched it promptly.
    assert summary["overall"]["late_end_to_end"] == 2
    overdue_stats = summary["by_target"][overdue_target]
    assert overdue_stats["lateness_ms"]["count"] == 1
    assert overdue_stats["lateness_ms"]["min"] >= 60_000
    assert overdue_stats["dispatch_lateness_ms"]["max"] <= 5_000
    auditors = summary["by_group"]["auditors"]
    assert auditors["events"]["delivered"] == 3 and auditors["lateness_ms"]["count"] == 0
    assert summary["by_target"][jobs]["events"]["delivered"] == 3
    events_by_target = summary["by_target"][target]["events"]
    assert events_by_target["delivered"] == 26 + 1 + 1  # real ones, the duplicate, the early one
    assert events_by_target["cancelled"] == 2
    assert events_by_target["scheduled"] == 28 + 2
    assert summary["overall"]["events"]["invalid"] == 1
    real_lateness = summary["by_target"][target]["lateness_ms"]
    assert real_lateness["count"] == 28 and real_lateness["p50"] >= 0
    html = (out / "report.html").read_text()
    for image in ("lateness_histogram.png", "lateness_over_time.png"):
        assert f'src="{image}"' in html and (out / image).stat().st_size > 0
