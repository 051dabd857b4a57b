"""The test fixtures themselves: every topic a test makes is under its names, and is deleted."""

from __future__ import annotations

import signal

from confluent_kafka import Producer
from kafka_helpers import SESSION_TAG, unique

from kpd_client import KpdClient


def test_sidecar_topics_stay_in_the_namespace_and_are_all_deleted(
    sidecar_factory, new_topic, admin, kafka_bootstrap, topic_cleanup
) -> None:
    before = {t for t in admin.list_topics(timeout=10).topics if SESSION_TAG in t}
    sidecar = sidecar_factory("a").start()
    namespace = sidecar.env["KPD_STATE_TOPIC_PREFIX"]
    topic, group = new_topic(), unique("g")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topic, b"one")
    assert producer.flush(30) == 0
    with KpdClient(sidecar.url) as kpd:
        [message] = kpd.pop(group, topic, wait_ms=10_000)
        assert kpd.ack(group, [message.receipt])[0]["status"] == "acked"

    made = {t for t in admin.list_topics(timeout=10).topics if SESSION_TAG in t} - before
    # The pop group's retry and DLQ topics are made by the sidecar, inside its namespace:
    assert {sidecar.retry_topic(group), sidecar.dlq_topic(group)} <= made
    assert {sidecar.env["KPD_BUFFER_TOPIC"], f"{namespace}schedules"} <= made
    assert {t for t in made if not t.startswith(namespace)} == {topic}

    sidecar.terminate(signal.SIGKILL)
    topic_cleanup.delete_all()
    left = {t for t in admin.list_topics(timeout=10).topics if SESSION_TAG in t} - before
    assert left == set()


def test_new_topic_is_visible_with_its_partitions_at_once(new_topic, kafka_bootstrap) -> None:
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    name = new_topic(partitions=4)
    metadata = producer.list_topics(name, timeout=10).topics[name]
    assert metadata.error is None
    assert sorted(metadata.partitions) == [0, 1, 2, 3]
    assert all(p.leader >= 0 for p in metadata.partitions.values())
