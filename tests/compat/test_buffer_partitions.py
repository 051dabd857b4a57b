"""A buffer topic of several partitions, as on real clusters: records about one id that land on
different partitions must give the answers docs/reference.md promises ("Decisions where the
design is silent"): the same id scheduled twice keeps the first schedule, and a cancel that
arrives before its schedule wins. The cancel test fixes the order in which the leader reads the
records (a delivered sentinel behind each); the duplicate test has both records in place before
the leader starts, in both partition orders.
"""

from __future__ import annotations

import pytest
from confluent_kafka.admin import NewTopic
from kafka_helpers import (
    TopicReader,
    buffer_record,
    delivered_ids,
    log_events,
    make_producer,
    now_ms,
    wait_for,
)

PARTITIONS = 3


def buffer_with_partitions(sidecar, admin) -> str:
    """Create the (namespaced, so cleaned up) buffer topic before the sidecar would."""
    buffer = sidecar.env["KPD_BUFFER_TOPIC"]
    admin.create_topics([NewTopic(buffer, PARTITIONS, -1)])[buffer].result(timeout=30)
    return buffer


def produce_then_sentinel(
    bootstrap: str, buffer: str, partition: int, record: tuple, target: str, sentinel: str
) -> None:
    """Produce `record` and a due-now sentinel behind it on `partition`; return once the
    sentinel is delivered (the leader has read past the record)."""
    producer = make_producer(bootstrap)
    marker = buffer_record(target, value=b"sentinel", delay_ms=0, schedule_id=sentinel)
    for key, value, headers in (record, marker):
        producer.produce(buffer, value=value, key=key, headers=headers, partition=partition)
    assert producer.flush(30) == 0
    with TopicReader(bootstrap, target) as reader:
        reader.read_until(lambda m: sentinel in delivered_ids(m), 30, f"sentinel {sentinel}")


@pytest.mark.parametrize(("first_partition", "second_partition"), [(2, 0), (0, 2)])
def test_same_id_on_two_partitions_keeps_the_first(
    sidecar_factory, new_topic, admin, kafka_bootstrap, first_partition, second_partition
) -> None:
    """The first schedule of an id to reach its shard wins (docs/architecture.md): the second
    record, on another partition and with the earlier due time, is produced once the first is
    scheduled. Both partition orders. (Records waiting on different partitions have no order
    Kafka knows.)"""
    sidecar = sidecar_factory("a")
    buffer, target = buffer_with_partitions(sidecar, admin), new_topic("dup")
    sidecar.start()
    t0 = now_ms()
    producer = make_producer(kafka_bootstrap)
    records = ((first_partition, b"first", t0 + 9000), (second_partition, b"second", t0 + 8000))
    with sidecar.client() as http:
        for partition, value, due in records:
            key, value, headers = buffer_record(
                target, value=value, deliver_at=due, schedule_id="dup"
            )
            producer.produce(buffer, value=value, key=key, headers=headers, partition=partition)
            assert producer.flush(30) == 0
            wait_for(lambda: http.get("/v1/schedules/dup").json().get("state") == "scheduled",
                     10, "the first record scheduled")  # fmt: skip
    with TopicReader(kafka_bootstrap, target) as reader:
        reader.read_until(lambda m: "dup" in delivered_ids(m), 30, "the id delivered")
        messages = reader.read_for(max(t0 + 9500 - now_ms(), 500) / 1000)  # past both due times
    assert [m.value() for m in messages if delivered_ids([m]) == ["dup"]] == [b"first"]


def test_cancel_before_its_schedule_is_booked_under_the_target(
    sidecar_factory, new_topic, admin, kafka_bootstrap
) -> None:
    sidecar = sidecar_factory("a")
    buffer, target = buffer_with_partitions(sidecar, admin), new_topic("cancel")
    sidecar.start()
    cancel = (None, None, [("kpd-cancel", b"late")])
    schedule = buffer_record(target, value=b"v", delay_ms=1000, schedule_id="late")
    produce_then_sentinel(kafka_bootstrap, buffer, 0, cancel, target, "sentinel-0")
    produce_then_sentinel(kafka_bootstrap, buffer, 2, schedule, target, "sentinel-2")
    with TopicReader(kafka_bootstrap, sidecar.env["KPD_DELIVERY_LOG_TOPIC"]) as reader:
        events = [e for e in log_events(reader.read_for(3.0)) if e["id"] == "late"]
    with sidecar.client() as http:
        assert http.get("/v1/schedules/late").json()["state"] == "cancelled"
    assert "delivered" not in [e["event"] for e in events], events
    # The audit must book the cancel under the schedule's target, not under "".
    assert target in [e["target"] for e in events if e["event"] == "cancelled"], events
