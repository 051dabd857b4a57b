"""A synthetic delivery log with known anomalies, and the answers the audit must find."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z


@dataclass
class SyntheticLog:
    """Records (dicts or raw lines) plus the answers the audit must find."""

    lines: list[str] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)  # the well-formed ones
    lateness: dict[str, list[int]] = field(default_factory=dict)  # per target, every delivery
    dispatch: dict[str, list[int]] = field(default_factory=dict)  # at - max(due, enqueued)

    def add(self, **record: Any) -> dict[str, Any]:
        base = {"due_ms": None, "enqueued_ms": None, "delivery_count": 1, "node": "node-a"}
        record = base | record
        self.records.append(record)
        self.lines.append(json.dumps(record))
        return record

    def schedule(self, id_: str, target: str, due: int, at: int | None = None) -> None:
        at = due - 5_000 if at is None else at
        self.add(event="scheduled", id=id_, target=target, due_ms=due, at_ms=at, enqueued_ms=at)

    def deliver(
        self,
        id_: str,
        target: str,
        due: int,
        at: int,
        node: str = "node-a",
        enqueued: int | None = None,
    ) -> None:
        """A delay delivery; enqueued 5 s before due unless given (None stays null in the log)."""
        enqueued_ms = due - 5_000 if enqueued is None else enqueued
        record = self.add(
            event="delivered",
            id=id_,
            target=target,
            due_ms=due,
            at_ms=at,
            enqueued_ms=enqueued_ms,
            node=node,
        )
        self.lateness.setdefault(target, []).append(at - due)
        start = due if record["enqueued_ms"] is None else max(due, record["enqueued_ms"])
        self.dispatch.setdefault(target, []).append(at - start)

    def deliver_unknown_enqueue(self, id_: str, target: str, due: int, at: int) -> None:
        """A delay delivery whose log record has `enqueued_ms: null`."""
        self.add(event="delivered", id=id_, target=target, due_ms=due, at_ms=at)
        self.lateness.setdefault(target, []).append(at - due)
        self.dispatch.setdefault(target, []).append(at - due)


def produce_log(bootstrap: str, topic: str, log: SyntheticLog) -> None:
    """Every line to `topic`, in at_ms order as a sidecar appends them, each with its at_ms as
    Kafka timestamp (timestamp pushdown relies on both); lines that are not records at T0."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    n_valid = len(log.records)
    entries = sorted(
        (log.records[i]["at_ms"] if i < n_valid else T0, i) for i in range(len(log.lines))
    )
    for at, i in entries:
        key = log.records[i]["id"].encode() if i < n_valid else None
        producer.produce(topic, value=log.lines[i].encode(), key=key, timestamp=at)
    assert producer.flush(30) == 0


def build_log(anomalies: bool = True) -> SyntheticLog:
    """20 on-time deliveries over ~3 minutes on two targets, cancels, pop events; with
    `anomalies`: one duplicate, one missing, one early, one late and five malformed records."""
    log = SyntheticLog()
    targets = ("orders", "emails")
    for i in range(20):
        target, due = targets[i % 2], T0 + i * 10_000
        log.schedule(f"s{i}", target, due)
        log.deliver(f"s{i}", target, due, due + (i * 7) % 50)
    for i in range(2):  # cancelled before their due time
        log.schedule(f"c{i}", "orders", T0 + 100_000 + i)
        log.add(
            event="cancelled",
            id=f"c{i}",
            target="orders",
            due_ms=T0 + 100_000 + i,
            at_ms=T0 + 20_000,
        )
    # Pop group `workers` on topic `jobs`: p1 retried twice then dead-lettered, p2 retried once.
    pop = {"target": "jobs", "group": "workers", "partition": 0, "node": "node-b"}
    log.add(event="retried", id="p1", at_ms=T0 + 1_000, delivery_count=1, offset=7, **pop)
    log.add(event="retried", id="p1", at_ms=T0 + 11_000, delivery_count=2, offset=7, **pop)
    log.add(event="retried", id="p2", at_ms=T0 + 12_000, delivery_count=1, offset=8, **pop)
    log.add(
        event="dead-lettered",
        id="p1",
        at_ms=T0 + 41_000,
        delivery_count=3,
        offset=7,
        reason="max deliveries",
        **pop,
    )
    # An `invalid` event is a valid log record (the buffer record was bad, not the log).
    log.add(
        event="invalid",
        id="kpd.delay-0@5",
        target="kpd.delay",
        at_ms=T0 + 2_000,
        reason="no kpd-target header",
        extra_field={"ignored": True},
    )
    # Not yet due + grace at the end of the log: pending, not missing.
    log.schedule("pending-1", "emails", T0 + 190_000, at=T0 + 1_000)
    if anomalies:
        log.deliver("s3", "emails", T0 + 30_000, T0 + 30_100, node="node-b")  # duplicate
        log.schedule("missing-1", "orders", T0 + 40_000)
        log.schedule("early-1", "orders", T0 + 50_000)
        log.deliver("early-1", "orders", T0 + 50_000, T0 + 50_000 - 200)
        log.schedule("late-1", "emails", T0 + 60_000)
        log.deliver("late-1", "emails", T0 + 60_000, T0 + 65_000)
        log.lines += [
            "this is not json {",
            "[1, 2, 3]",
            json.dumps({"event": "delivered", "id": "x1"}),  # required fields missing
            json.dumps(  # due_ms as a string: wrong type, not silently cast
                {
                    "event": "delivered",
                    "id": "x2",
                    "target": "orders",
                    "due_ms": "123",
                    "at_ms": T0,
                    "enqueued_ms": None,
                    "delivery_count": 1,
                    "node": "n",
                }
            ),
            json.dumps(
                {
                    "event": "teleported",
                    "id": "x3",
                    "target": "orders",
                    "due_ms": T0,
                    "at_ms": T0,
                    "enqueued_ms": None,
                    "delivery_count": 1,
                    "node": "n",
                }
            ),
        ]
    return log


def arrived_late_log() -> SyntheticLog:
    """100 prompt deliveries, and 10 schedules that reached kpd 5-6 s after their due time and
    were dispatched within 15 ms of arriving: late end to end, prompt by kpd's own measure.
    Plus a delivery with unknown enqueue time, pop deliveries (one message delivered twice, as
    pop does) and a schedule settled to kpd.invalid."""
    log = SyntheticLog()
    for i in range(100):
        due = T0 + i * 1_000
        log.schedule(f"ok{i}", "orders", due)
        log.deliver(f"ok{i}", "orders", due, due + i % 40, enqueued=due - 10_000)
    for i in range(10):
        due, arrived = T0 + i * 1_000 + 500, T0 + i * 1_000 + 5_500 + i * 100
        log.schedule(f"overdue{i}", "orders", due, at=arrived)
        log.deliver(f"overdue{i}", "orders", due, arrived + 5 + i, enqueued=arrived)
    log.schedule("unknown-enqueue", "emails", T0 + 50_000)
    log.deliver_unknown_enqueue("unknown-enqueue", "emails", T0 + 50_000, T0 + 50_030)
    pop = {"target": "jobs", "group": "workers", "partition": 0, "offset": 3, "node": "node-b"}
    for count in (1, 2):  # the same message again after its lease ended: not a duplicate
        log.add(event="delivered", id="jobs:0:3", at_ms=T0 + count * 40_000,
                enqueued_ms=T0, delivery_count=count, **pop)  # fmt: skip
    log.schedule("gone-1", "orders", T0 + 2_000)
    log.add(event="invalid", id="gone-1", target="orders", due_ms=T0 + 2_000,
            at_ms=T0 + 2_001, reason="target no longer exists")  # fmt: skip
    return log
