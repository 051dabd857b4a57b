"""Ack and produce in one transaction over real HTTP against real Kafka: a worker's acks and the
records it produces commit together or not at all, a retried call with its `request_id` answers
as the first did, and a read_committed reader sees each produced record once, across a killed
owner."""

from __future__ import annotations

import signal
import threading
from typing import Any

from kafka_helpers import (
    TopicReader,
    led_shards,
    make_producer,
    pop_until,
    produce_all,
    unique,
    wait_for,
)

from foundation.shards import ShardMap
from kpd_client import KpdClient, run_worker
from kpd_client.retry import KpdError

ONE_SHARD = {"shards": "1", "workers": "1"}


def produce(bootstrap: str, topic: str, values: list[str], partition: int | None = None) -> None:
    records = [(None, value.encode(), []) for value in values]
    produce_all(make_producer(bootstrap), topic, records, partition=partition)


def ack_call(sidecar, group: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    with sidecar.client() as http:
        answer = http.post(f"/v1/groups/{group}/ack", json=body)
    return answer.status_code, answer.json()


def values_until(reader: TopicReader, marker: bytes) -> list[bytes]:
    """Every value `reader` sees before `marker`, which a later call produced: what an earlier
    call wrote to the partition, if anything, is committed before it."""
    reader.read_until(lambda seen: marker in [m.value() for m in seen], 30, f"{marker!r}")
    values = [m.value() for m in reader.messages]
    return values[: values.index(marker)]


def test_acks_and_records_commit_together_and_a_retry_answers_as_the_first(
    sidecar_factory, new_topic, kafka_bootstrap
) -> None:
    sidecar = sidecar_factory("a", **ONE_SHARD).start()
    source, out, later = new_topic("src"), new_topic("out"), new_topic("later")
    produce(kafka_bootstrap, source, ["m0", "m1", "m2"])
    group = unique("g")
    with KpdClient(sidecar.url) as kpd:
        m0, m1, m2 = pop_until(kpd, group, source, 3)
    produced = [
        {"topic": out, "key": "k", "value": "r0", "headers": {"h": "v"}},
        {"topic": later, "value": "d0", "delay_ms": 1500},
    ]
    first = {"receipts": [m0.receipt], "produce": produced, "request_id": "call-1"}
    status, answer = ack_call(sidecar, group, first)
    assert status == 200, answer
    assert answer["results"] == [{"receipt": m0.receipt, "status": "acked"}]
    enqueued, scheduled = answer["produced"]
    assert enqueued == {"topic": out, "status": "enqueued"}
    assert scheduled["topic"] == later and scheduled["status"] == "scheduled"
    # The same call again (its answer lost, say): the same answer, and nothing done twice.
    assert ack_call(sidecar, group, first) == (200, answer)
    status, reused = ack_call(sidecar, group, {**first, "receipts": [m1.receipt]})
    assert (status, reused["code"]) == (422, "request_id_reused")
    # A receipt that would not be acked: nothing is acked, nothing is produced.
    refused = {"receipts": [m1.receipt, m0.receipt], "produce": [{"topic": out, "value": "x"}]}
    status, problem = ack_call(sidecar, group, refused)
    assert (status, problem["code"]) == (409, "not_acked")
    assert [r["status"] for r in problem["results"]] == ["acked", "already_acked"]
    with KpdClient(sidecar.url) as kpd:
        marker = [{"topic": out, "value": "marker"}]
        assert kpd.ack(group, [m1.receipt], produce=marker) == [
            {"receipt": m1.receipt, "status": "acked"}
        ]
        assert kpd.pop(group, source, wait_ms=0) == []  # m2 stays leased; m0 and m1 are acked
        assert kpd.ack(group, [m2.receipt]) == [{"receipt": m2.receipt, "status": "acked"}]
    with TopicReader(kafka_bootstrap, out) as reader:
        assert values_until(reader, b"marker") == [b"r0"]
        (r0,) = reader.messages[:1]
        assert (r0.key(), dict(r0.headers() or [])) == (b"k", {"h": b"v"})
    with TopicReader(kafka_bootstrap, later) as reader:
        (delivered,) = reader.read_count(1, 30)
        assert delivered.value() == b"d0"
        assert delivered.timestamp()[1] >= scheduled["deliver_at_ms"]  # never early
        assert len(reader.read_for(1.0)) == 1


def test_a_call_refused_whole_changes_nothing(sidecar_factory, new_topic, kafka_bootstrap) -> None:
    """Each refusal is checked before anything changes: the receipts stay leased, nothing is
    written."""
    sidecar = sidecar_factory("a", shards="2", workers="1").start()
    source, out = new_topic("src", partitions=4), new_topic("out")
    for partition in range(4):
        produce(kafka_bootstrap, source, [f"p{partition}"], partition)
    group = unique("g")
    with KpdClient(sidecar.url) as kpd:
        popped = pop_until(kpd, group, source, 4)
    shard_of = ShardMap(2, 2).of_lane
    by_shard = {shard_of(group, source, m.partition): m.receipt for m in popped}
    assert len(by_shard) == 2  # the lanes of the 4 partitions spread over both shards
    receipt = by_shard[0]

    def refused(receipts: list[str], produce_: list[dict[str, Any]], **more: Any) -> tuple:
        status, problem = ack_call(
            sidecar, group, {"receipts": receipts, "produce": produce_, **more}
        )
        return status, problem["code"]

    one = [{"topic": out, "value": "x"}]
    assert refused(list(by_shard.values()), one) == (422, "receipts_span_shards")
    assert refused([receipt], [{"topic": unique("missing"), "value": "x"}]) == (
        404, "topic_not_found"
    )  # fmt: skip
    retry_topic = sidecar.retry_topic(group)
    assert refused([receipt], [{"topic": retry_topic, "value": "x"}]) == (403, "kpd_topic")
    assert refused([receipt], [{"topic": "__consumer_offsets", "value": "x"}]) == (
        403, "internal_topic"
    )  # fmt: skip
    huge = [{"topic": out, "value": "x" * 2_000_000}]
    assert refused([receipt], huge) == (413, "record_too_large")
    assert refused([receipt, receipt], one) == (422, "invalid_request")
    assert refused([receipt], one, request_id="bad id") == (422, "invalid_request")
    assert refused([receipt], [{"topic": out, "value": "x", "delay_ms": 10**15}]) == (
        422, "invalid_request"
    )  # fmt: skip
    assert refused(["garbage"], one) == (409, "not_acked")
    assert refused([receipt], one * 1001) == (422, "invalid_request")  # over the 1000 allowed
    assert refused([receipt] + [f"r{i}" for i in range(1000)], one) == (422, "invalid_request")
    status, problem = ack_call(sidecar, group, {"receipts": [receipt], "request_id": "r"})
    assert (status, problem["code"]) == (422, "invalid_request")  # request_id needs produce
    with KpdClient(sidecar.url) as kpd:
        assert kpd.ack(group, [receipt], produce=[{"topic": out, "value": "marker"}]) == [
            {"receipt": receipt, "status": "acked"}
        ]
    with TopicReader(kafka_bootstrap, out) as reader:
        assert values_until(reader, b"marker") == []


def test_each_record_once_across_a_killed_owner(
    sidecar_factory, new_topic, kafka_bootstrap
) -> None:
    """A worker acks each message with its record while the shard's owner is SIGKILLed: a call
    in flight is sent again to the other sidecar with its request_id, a call answered before the
    kill answers the same there, and a read_committed reader sees each record exactly once."""
    a = sidecar_factory("a", **ONE_SHARD).start()
    wait_for(lambda: led_shards(a) == {0}, 60, "a leads the shard")
    b = sidecar_factory("b", **ONE_SHARD).start()
    source, out = new_topic("src"), new_topic("out")
    inputs = [f"v{i}" for i in range(300)]
    produce(kafka_bootstrap, source, inputs)
    group, stop = unique("g"), threading.Event()
    acked: list[str] = []

    def work() -> None:
        with KpdClient([a.url, b.url], retry_deadline_s=60) as kpd:
            while not stop.is_set() and len(acked) < len(inputs):
                for message in kpd.pop(group, source, 10, 5_000, wait_ms=1000):
                    value = message.value.decode()
                    try:
                        kpd.ack(group, [message.receipt], produce=[{"topic": out, "value": value}])
                    except KpdError as error:
                        assert error.code == "not_acked", error  # the lease ended: it comes again
                        continue
                    acked.append(value)

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    with KpdClient(a.url) as kpd:
        wait_for(lambda: len(acked) >= 50, 60, "50 messages handled")
        (message,) = pop_until(kpd, group, source, 1)
        body = {
            "receipts": [message.receipt],
            "produce": [{"topic": out, "value": message.value.decode()}],
            "request_id": "before-the-kill",
        }
        status, answer = ack_call(a, group, body)
        assert status == 200, answer
        acked.append(message.value.decode())
    a.terminate(signal.SIGKILL)
    wait_for(lambda: led_shards(b) == {0}, 60, "b leads the shard")
    # The call a answered before it died: b knows its answer, once b's pop role runs.
    again: list[tuple[int, dict[str, Any]]] = []
    wait_for(lambda: again.append(ack_call(b, group, body)) or again[-1][0] != 503, 60, "b")
    assert again[-1] == (200, answer)
    worker.join(timeout=120)
    stop.set()
    assert not worker.is_alive()
    assert sorted(acked) == sorted(inputs)
    with TopicReader(kafka_bootstrap, out) as reader:
        reader.read_count(len(inputs), 60)
        values = [m.value().decode() for m in reader.read_for(1.0)]
    assert sorted(values) == sorted(inputs)  # each once: none lost, none twice


def test_a_worker_handler_returns_the_records_its_ack_writes(
    sidecar_factory, new_topic, kafka_bootstrap
) -> None:
    sidecar = sidecar_factory("a", **ONE_SHARD).start()
    source, out = new_topic("src"), new_topic("out")
    inputs = [f"w{i}" for i in range(20)]
    produce(kafka_bootstrap, source, inputs)
    group, stop, handled = unique("g"), threading.Event(), []

    def handler(message) -> list[dict[str, Any]] | None:
        handled.append(message.value)
        if len(handled) == len(inputs):
            stop.set()
        if message.value == b"w0":
            return None  # a plain ack
        return [{"topic": out, "value": message.value.decode().upper()}]

    with KpdClient(sidecar.url) as kpd:
        run_worker(kpd, group, source, handler, wait_ms=500, stop=stop)
        assert kpd.pop(group, source, wait_ms=0) == []  # every one acked
    with TopicReader(kafka_bootstrap, out) as reader:
        reader.read_count(len(inputs) - 1, 30)
        values = sorted(m.value() for m in reader.read_for(0.5))
    assert values == sorted(v.upper().encode() for v in inputs[1:])
