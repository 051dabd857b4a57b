"""Pop-group calls with hostile input against a real sidecar: bad receipts fail only themselves,
and pop refuses kpd's own topics and Kafka's internal ones before touching Kafka."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from kafka_helpers import TopicReader, unique, wait_for

BAD_RECEIPTS = ["", "A" * 100_000, "not a receipt", "\ud800", "ünïcödé", "AQ"]


@pytest.fixture
def sidecar(sidecar_factory):
    return sidecar_factory("a", group_defaults__backoff_ms="[500]").start()


def _post(http, path: str, body: dict) -> dict:
    # json.dumps escapes a lone surrogate as the six characters \ud800, which JSON allows.
    content = json.dumps(body).encode()
    answer = http.post(path, content=content, headers={"content-type": "application/json"})
    assert answer.status_code == 200, answer.text
    return answer.json()


def _statuses(answer: dict) -> list[str]:
    return [r["status"] for r in answer["results"]]


def test_bad_receipts_are_invalid_items_and_the_good_ones_settle(
    sidecar, new_topic, kafka_bootstrap
):
    topic, group = new_topic(), unique("g")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for value in ("acked", "extended", "nacked", "rejected"):
        producer.produce(topic, value.encode(), key=value.encode())
    assert producer.flush(30) == 0
    pop = f"/v1/groups/{group}/topics/{topic}/pop"
    with sidecar.client() as http:
        popped: list = []

        def all_popped() -> bool:
            body = {"max_messages": 4 - len(popped), "invisible_ms": 3000, "wait_ms": 1000}
            popped.extend(http.post(pop, json=body).json()["messages"])
            return len(popped) == 4

        wait_for(all_popped, 30, "4 messages popped")
        receipt = {m["value"]: m["receipt"] for m in popped}
        lease_end_ms = max(m["invisible_until_ms"] for m in popped)

        answer = _post(
            http, f"/v1/groups/{group}/ack", {"receipts": [*BAD_RECEIPTS, receipt["acked"]]}
        )
        assert _statuses(answer) == ["invalid"] * len(BAD_RECEIPTS) + ["acked"]
        assert [r["receipt"] for r in answer["results"]] == [*BAD_RECEIPTS, receipt["acked"]]
        assert answer["results"][0]["detail"] == "receipt is empty"

        items = [
            {"receipt": r, "invisible_ms": 60_000} for r in [receipt["extended"], *BAD_RECEIPTS]
        ]
        answer = _post(http, f"/v1/groups/{group}/leases", {"items": items})
        assert _statuses(answer) == ["ok"] + ["invalid"] * len(BAD_RECEIPTS)

        items = [{"receipt": r, "delay_ms": 0} for r in [*BAD_RECEIPTS, receipt["nacked"]]]
        answer = _post(http, f"/v1/groups/{group}/nack", {"items": items})
        assert _statuses(answer) == ["invalid"] * len(BAD_RECEIPTS) + ["requeued"]

        items = [{"receipt": r, "reason": "bad"} for r in [receipt["rejected"], *BAD_RECEIPTS]]
        answer = _post(http, f"/v1/groups/{group}/reject", {"items": items})
        assert _statuses(answer) == ["dead_lettered"] + ["invalid"] * len(BAD_RECEIPTS)

        # The state after: only the nacked message comes back, also once every first lease ended.
        back: list = []
        while time.time() * 1000 < lease_end_ms + 1500:
            back += http.post(pop, json={"invisible_ms": 60_000, "wait_ms": 500}).json()["messages"]
        assert [(m["value"], m["delivery_count"]) for m in back] == [("nacked", 2)]
        stats = http.get(f"/v1/groups/{group}").json()
        assert stats["topics"][topic]["in_flight"] == 2  # extended and the nacked redelivery
        assert stats["dead_lettered"] == 1
    with TopicReader(kafka_bootstrap, sidecar.dlq_topic(group)) as dlq:
        [dead] = dlq.read_count(1, 30)
        assert dead.value() == b"rejected"


def test_batch_shapes_are_still_validated(sidecar):
    with sidecar.client() as http:
        for path, body in [
            ("ack", {"receipts": []}),
            ("ack", {"receipts": [1]}),
            ("ack", {"receipts": [None]}),
            ("ack", {"receipts": ["r"] * 1001}),
            ("nack", {"items": [{"receipt": "r", "delay_ms": False}]}),
            ("leases", {"items": [{"receipt": "r", "invisible_ms": True}]}),
            ("reject", {"items": [{"receipt": "r", "reason": "x" * 1001}]}),
        ]:
            answer = http.post(f"/v1/groups/g/{path}", json=body)
            assert answer.status_code == 422, (path, body, answer.text)
            assert answer.json()["code"] == "invalid_request"


def test_pop_refuses_kpd_and_internal_topics(sidecar, kafka_bootstrap, admin):
    group = unique("g")
    env = sidecar.env
    refused = {
        "__consumer_offsets": "internal_topic",
        "__anything": "internal_topic",
        env["KPD_BUFFER_TOPIC"]: "kpd_topic",
        env["KPD_INVALID_TOPIC"]: "kpd_topic",
        env["KPD_DELIVERY_LOG_TOPIC"]: "kpd_topic",
        f"{env['KPD_STATE_TOPIC_PREFIX']}pop-state": "kpd_topic",
        f"{env['KPD_STATE_TOPIC_PREFIX']}schedules": "kpd_topic",
        sidecar.retry_topic(group): "kpd_topic",
        sidecar.dlq_topic(group): "kpd_topic",
    }
    with sidecar.client() as http:
        for topic, code in refused.items():
            answer = http.post(f"/v1/groups/{group}/topics/{topic}/pop", json={"wait_ms": 1000})
            assert answer.status_code == 403, (topic, answer.text)
            assert answer.headers["content-type"] == "application/problem+json"
            assert answer.json()["code"] == code
        produced = http.post(
            "/v1/topics/__consumer_offsets/messages", json={"messages": [{"value": "x"}]}
        ).json()["results"]
        assert [(r["status"], r["code"]) for r in produced] == [("error", "internal_topic")]
        # The state after: the group never read any of them, nor committed offsets for them.
        assert http.get(f"/v1/groups/{group}").json()["topics"] == {}
    request = ConsumerGroupTopicPartitions(group, [TopicPartition("__consumer_offsets", 0)])
    offsets = admin.list_consumer_group_offsets([request])[group].result()
    assert [tp.offset for tp in offsets.topic_partitions] == [-1001]  # nothing committed
