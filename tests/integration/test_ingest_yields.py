"""A delay step that carries a delivery ingests for at most `KPD_INGEST_BEHIND_DELIVERY_MS` more
before its commit makes the delivery visible (`delay_service.leader`); a step with nothing due
ingests its whole batch. Each cut is counted in `kpd_delay_ingest_yields_total`.

The sidecar here cuts at once (0 ms): with the default 20 ms, whether a step is cut depends on
the machine's speed. A worker that ingests 50k schedules/s takes 20 ms for a whole batch of
1,000, and a faster one never cuts: a CI run on such a machine counted no cut step. The backlog
is sized so that ingesting it takes many steps while records come due every 50 ms. The due
records and the second backlog are written in one transaction, so the sidecar (read_committed)
finds the whole backlog behind them at once, however slowly this machine produces it."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from confluent_kafka import Producer
from kafka_helpers import (
    TopicReader,
    assert_exactly_once,
    assert_never_early,
    buffer_record,
    make_producer,
    now_ms,
    produce_all,
    produce_one,
    wait_delivering,
    wait_for,
)

BACKLOG = 40_000
DAY_MS = 86_400_000
DUE = 60
DUE_EVERY_MS = 50


def produce_at_once(bootstrap: str, topic: str, records: Iterable[tuple]) -> None:
    """`records` in one transaction: a read_committed reader sees all of them at the commit."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"yields-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for key, value, headers in records:
        produce_one(producer, topic, key, value, headers)
    producer.commit_transaction(60)


def test_a_step_with_deliveries_cuts_its_ingest_short(sidecar_factory, new_topic, kafka_bootstrap):
    sidecar = sidecar_factory("a", ingest_behind_delivery_ms="0").start()
    buffer = sidecar.env["KPD_BUFFER_TOPIC"]
    with sidecar.client() as http:
        wait_delivering(http, new_topic("warm"))

    def counter(name: str) -> float:
        return sidecar.metrics().get(name, 0.0)  # summed over labels

    far, target = new_topic("far"), new_topic("due")
    producer = make_producer(kafka_bootstrap)

    def backlog() -> list:
        return [buffer_record(far, value=b"v" * 200, deliver_at=now_ms() + DAY_MS)] * BACKLOG

    # Nothing due: every step ingests whole batches, and none is cut.
    yields = counter("kpd_delay_ingest_yields_total")
    scheduled = counter("kpd_schedules_scheduled_total")
    produce_all(producer, buffer, backlog())
    wait_for(
        lambda: counter("kpd_schedules_scheduled_total") >= scheduled + BACKLOG, 120, "backlog in"
    )
    assert counter("kpd_delay_ingest_yields_total") == yields

    # Records coming due one after another while a second backlog is ingested: the first are
    # due at once, so the first steps that ingest the backlog carry deliveries whatever the
    # time the transaction takes.
    first_due = now_ms()
    due = [
        buffer_record(
            target, value=str(i).encode(), deliver_at=first_due + i * DUE_EVERY_MS,
            schedule_id=f"due-{i}",
        )
        for i in range(DUE)
    ]  # fmt: skip
    with TopicReader(kafka_bootstrap, target) as reader:
        produce_at_once(kafka_bootstrap, buffer, due + backlog())
        reader.read_until(lambda m: len(m) >= DUE, 120, "every due record")
        messages = reader.read_for(1.0)  # settle: nothing extra may follow
    assert_never_early(messages)
    assert_exactly_once(messages, {f"due-{i}" for i in range(DUE)})
    wait_for(
        lambda: counter("kpd_schedules_scheduled_total") >= scheduled + 2 * BACKLOG + DUE,
        120,
        "second backlog in",
    )
    assert counter("kpd_delay_ingest_yields_total") > yields
