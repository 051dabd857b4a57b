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

    def add(self, **record: Any) -> dict[str, Any]:
        base = {"due_ms": None, "enqueued_ms": None, "delivery_count": 1, "node": "node-a"}
        record = base | record
        self.records.append(record)
        self.lines.append(json.dumps(record))
        return record

    def schedule(self, id_: str, target: str, due: int, at: int | None = None) -> None:
        at = due - 5_000 if at is None else at
        self.add(event="scheduled", id=id_, target=target, due_ms=due, at_ms=at, enqueued_ms=at)

    def deliver(self, id_: str, target: str, due: int, at: int, node: str = "node-a") -> None:
        self.add(
            event="delivered",
            id=id_,
            target=target,
            due_ms=due,
            at_ms=at,
            enqueued_ms=due - 5_000,
            node=node,
        )
        self.lateness.setdefault(target, []).append(at - due)


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
