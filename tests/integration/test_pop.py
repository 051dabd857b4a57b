"""Pop consumption over real HTTP against real Kafka: leases, acks, revive, retry and DLQ."""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

import httpx
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from kafka_helpers import (
    TopicReader,
    leader_restarts,
    led_shards,
    metric_total,
    metric_values,
    pop_until,
    standby_shards,
    unique,
    wait_for,
)

from devtools.broker_for_tests import free_port
from foundation.record_size import HEADER_FRAMING_BYTES
from kpd_client import KpdClient, run_worker
from revive.held_records import ENTRY_OVERHEAD_BYTES


def produce(bootstrap: str, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value.encode(), key=value.encode())
    assert producer.flush(30) == 0


def read_all(bootstrap: str, topic: str, expected: int, timeout_s: float = 30) -> list:
    with TopicReader(bootstrap, topic) as reader:
        return reader.read_count(expected, timeout_s)


def parked(http) -> float:
    """Pop calls the leader holds open (long polls), from its /metrics."""
    return metric_values(http).get("kpd_pop_parked", 0)


OFFSETS_SENT = "kpd_transaction_seconds_count{phase=offsets,role=pop}"


def committed_offset(admin, group: str, topic: str, partition: int = 0) -> int:
    futures = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, partition)])]
    )
    return futures[group].result().topic_partitions[0].offset


def floor_moved(admin, prefix: str) -> bool:
    """Has a pop leader committed a replay floor past the first record of its pop-state topic
    (a test's first checkpoint)?"""
    request = ConsumerGroupTopicPartitions(f"{prefix}pop-floor")
    found = admin.list_consumer_group_offsets([request])[request.group_id].result()
    return any(tp.offset > 0 for tp in found.topic_partitions)


# Every group gets 1.5 s backoff and 3 deliveries, so retry paths finish quickly.
FAST_groupS = {"group_defaults__backoff_ms": "[1500]", "group_defaults__max_deliveries": "3"}


@pytest.fixture
def leader(sidecar_factory):
    return sidecar_factory("a", **FAST_groupS).start()


@pytest.fixture
def group() -> str:
    """A group of its own per test, so its retry and DLQ topics are the test's own too."""
    return unique("g")


def test_concurrent_workers_never_share_a_message_and_all_are_acked_once(
    leader, group, new_topic, kafka_bootstrap
) -> None:
    topic = new_topic(partitions=3)
    values = [f"m{i}" for i in range(300)]
    produce(kafka_bootstrap, topic, values)
    held: dict[str, str] = {}  # value -> worker holding it now
    overlaps: list[str] = []
    acked: Counter[str] = Counter()
    lock = threading.Lock()

    def worker(name: str) -> None:
        with KpdClient(leader.url) as kpd:
            while True:
                with lock:
                    if sum(acked.values()) >= len(values):
                        return
                batch = kpd.pop(group, topic, max_messages=7, invisible_ms=60_000, wait_ms=500)
                with lock:
                    for m in batch:
                        if m.value.decode() in held:
                            overlaps.append(m.value.decode())
                        held[m.value.decode()] = name
                results = kpd.ack(group, [m.receipt for m in batch]) if batch else []
                with lock:
                    for m, r in zip(batch, results, strict=True):
                        del held[m.value.decode()]
                        if r["status"] == "acked":
                            acked[m.value.decode()] += 1

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert overlaps == []
    assert set(acked) == set(values)
    assert max(acked.values()) == 1


def test_lease_expiry_redelivers_with_next_count_and_supersedes_old_receipt(
    leader, group, new_topic, kafka_bootstrap
) -> None:
    topic = new_topic()
    produce(kafka_bootstrap, topic, ["only"])
    with leader.client() as http, KpdClient(leader.url) as kpd:
        [first] = pop_until(kpd, group, topic, 1, invisible_ms=1000)
        assert first.delivery_count == 1
        assert kpd.pop(group, topic, wait_ms=0) == []  # invisible to others meanwhile
        [second] = pop_until(kpd, group, topic, 1, invisible_ms=30_000)
        assert second.delivery_count == 2
        assert (second.topic, second.partition, second.offset) == (topic, 0, 0)
        assert time.time() * 1000 >= first.invisible_until_ms
        assert kpd.ack(group, [first.receipt])[0]["status"] == "superseded"
        # The stale receipt did not touch the new delivery:
        assert kpd.ack(group, [second.receipt])[0]["status"] == "acked"
        assert kpd.ack(group, [second.receipt])[0]["status"] == "already_acked"
        assert "kpd_pop_retried_total" in http.get("/metrics").text


def test_a_lease_is_revived_when_it_ends_not_at_the_next_idle_wake(
    leader, group, new_topic, kafka_bootstrap
) -> None:
    """An idle pop service waits up to 250 ms between requests (`QUIET_WAIT_S`), or less when
    a lease ends sooner: each expired lease here is copied to the retry topic within
    milliseconds of its deadline, never before. Waking only every 250 ms would make them 125 ms
    late on average."""
    topic = new_topic()
    values = [f"m{i}" for i in range(6)]
    produce(kafka_bootstrap, topic, values)
    with KpdClient(leader.url) as kpd:
        # One lease at a time, their deadlines 67 ms apart: not in step with any idle period.
        leases = [pop_until(kpd, group, topic, 1, invisible_ms=1_000 + 67 * i)[0] for i in range(6)]
        retry_topic = kpd.group(group)["config"]["retry_topic"]
    deadline = {lease.value: lease.invisible_until_ms for lease in leases}
    copies = read_all(kafka_bootstrap, retry_topic, 6)
    late = [copy.timestamp()[1] - deadline[copy.value()] for copy in copies]
    assert sorted(copy.value() for copy in copies) == sorted(v.encode() for v in values)
    assert min(late) >= 0
    assert sum(late) / len(late) < 40, late


def test_nack_with_delay_and_with_group_backoff(leader, group, new_topic, kafka_bootstrap) -> None:
    topic = new_topic()
    produce(kafka_bootstrap, topic, ["a", "b"])
    with KpdClient(leader.url) as kpd:
        popped = pop_until(kpd, group, topic, 2)
        by_value = {m.value: m for m in popped}
        nacked_at = time.time() * 1000
        assert kpd.nack(group, [by_value[b"a"].receipt], delay_ms=1000)[0]["status"] == "requeued"
        assert kpd.nack(group, [by_value[b"b"].receipt])[0]["status"] == "requeued"  # 1500 ms
        back = pop_until(kpd, group, topic, 2)
        assert {m.value: m.delivery_count for m in back} == {b"a": 2, b"b": 2}
        # Retries come through the delay service: never before the nack delay / backoff.
        assert min(m.timestamp_ms for m in back) >= nacked_at
        # Produced without headers: kpd's bookkeeping headers are never shown to workers.
        assert [m.headers for m in back] == [{}, {}]
        retry_topic = kpd.group(group)["config"]["retry_topic"]
        retry_records = read_all(kafka_bootstrap, retry_topic, 2)
        due = {r.key(): int(dict(r.headers())["kpd-deliver-at"]) for r in retry_records}
        assert due[b"a"] >= nacked_at + 1000
        assert due[b"b"] >= nacked_at + 1500
        for record in retry_records:
            assert record.timestamp()[1] >= due[record.key()]  # never early


def test_copies_are_made_from_the_records_the_leader_handed_out(
    leader, group, new_topic, kafka_bootstrap
) -> None:
    """A nack, an expired lease and a reject are copied from what the leader holds since it
    handed the records out: nothing is read back from Kafka (`kpd_pop_copy_reads_total`), and
    each copy carries its message as produced (key, value, user headers)."""
    topic = new_topic()
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for name in ("nacked", "expired", "rejected"):
        producer.produce(topic, name.encode() * 3, key=name.encode(), headers=[("trace", name)])
    assert producer.flush(30) == 0
    with leader.client() as http, KpdClient(leader.url) as kpd:
        popped = {m.key: m for m in pop_until(kpd, group, topic, 3, invisible_ms=1500)}
        # entry + key (n) + value (3n) + the header ("trace", n) with its framing, for each of the 3
        held = sum(ENTRY_OVERHEAD_BYTES + 5 * len(n) + 5 + HEADER_FRAMING_BYTES for n in popped)
        assert metric_total(metric_values(http), "kpd_pop_held_bytes") == held
        assert kpd.nack(group, [popped["nacked"].receipt], delay_ms=0)[0]["status"] == "requeued"
        [rejected] = kpd.reject(group, [popped["rejected"].receipt], reason="no")
        assert rejected["status"] == "dead_lettered"
        back = pop_until(kpd, group, topic, 2)  # the nacked one at once, the other on expiry
        assert sorted((m.key, m.value, m.headers, m.delivery_count) for m in back) == [
            ("expired", b"expiredexpiredexpired", {"trace": "expired"}, 2),
            ("nacked", b"nackednackednacked", {"trace": "nacked"}, 2),
        ]
        [dead] = read_all(kafka_bootstrap, leader.dlq_topic(group), 1)
        assert (dead.key(), dead.value()) == (b"rejected", b"rejectedrejectedrejected")
        assert dict(dead.headers())["trace"] == b"rejected"
        values = metric_values(http)
        assert values["kpd_pop_retried_total"] == 2
        assert values["kpd_pop_dead_lettered_total"] == 1
        assert values["kpd_pop_copy_reads_total"] == 0
        acks = kpd.ack(group, [m.receipt for m in back] + [popped["nacked"].receipt])
        assert [r["status"] for r in acks] == ["acked", "acked", "superseded"]
        values = metric_values(http)
        assert values["kpd_pop_acked_total"] == 2
        assert metric_total(values, "kpd_pop_held_bytes") == 0  # all settled


def test_extend_keeps_a_message_invisible(leader, group, new_topic, kafka_bootstrap) -> None:
    topic = new_topic()
    produce(kafka_bootstrap, topic, ["slow"])
    with KpdClient(leader.url) as kpd:
        [message] = pop_until(kpd, group, topic, 1, invisible_ms=1000)
        [result] = kpd.extend(group, [message.receipt], 4000)
        assert (
            result["status"] == "ok" and result["invisible_until_ms"] > message.invisible_until_ms
        )
        assert kpd.pop(group, topic, wait_ms=2000) == []  # past the first lease, still hidden
        assert kpd.ack(group, [message.receipt])[0]["status"] == "acked"


def test_reject_and_max_deliveries_go_to_the_dlq(leader, group, new_topic, kafka_bootstrap) -> None:
    topic = new_topic()
    produce(kafka_bootstrap, topic, ["bad", "tired"])
    with KpdClient(leader.url) as kpd:
        by_value = {m.value: m for m in pop_until(kpd, group, topic, 2)}
        [rejected] = kpd.reject(group, [by_value[b"bad"].receipt], reason="cannot parse")
        assert rejected["status"] == "dead_lettered"
        receipt = by_value[b"tired"].receipt
        for count in (1, 2):
            assert kpd.nack(group, [receipt], delay_ms=0)[0]["status"] == "requeued"
            [again] = pop_until(kpd, group, topic, 1)
            assert again.delivery_count == count + 1
            receipt = again.receipt
        assert kpd.nack(group, [receipt])[0]["status"] == "dead_lettered"
        assert kpd.group(group)["dead_lettered"] == 2
    dead_letters = read_all(kafka_bootstrap, leader.dlq_topic(group), 2)
    dead = {m.key(): dict(m.headers()) for m in dead_letters}
    assert dead[b"bad"]["kpd-dlq-reason"] == b"rejected: cannot parse"
    assert dead[b"tired"]["kpd-dlq-reason"] == b"max deliveries (3) reached"
    assert dead[b"tired"]["kpd-delivery-count"] == b"3"
    for headers in dead.values():
        assert headers["kpd-origin-topic"] == topic.encode()
        assert headers["kpd-origin-partition"] == b"0"
    assert {dead[b"bad"]["kpd-origin-offset"], dead[b"tired"]["kpd-origin-offset"]} == {b"0", b"1"}


def test_forged_malformed_and_foreign_receipts_change_nothing(
    leader, group, new_topic, kafka_bootstrap
) -> None:
    topic = new_topic()
    produce(kafka_bootstrap, topic, ["x"])
    with KpdClient(leader.url) as kpd:
        [message] = pop_until(kpd, group, topic, 1, invisible_ms=30_000)
        receipt = message.receipt
        forged = receipt[:-2] + ("A" if receipt[-2] != "A" else "B") + receipt[-1]
        hostile = [forged, "", "x" * 600, "../../etc/passwd", "ünïcödé", receipt + "="]
        for status in kpd.ack(group, [r for r in hostile if r]):
            assert status["status"] == "invalid"
        assert kpd.ack("other-group", [receipt])[0]["status"] == "invalid"
        assert kpd.nack(group, [forged])[0]["status"] == "invalid"
        assert kpd.extend(group, [forged], 1000)[0]["status"] == "invalid"
        assert kpd.reject(group, [forged])[0]["status"] == "invalid"
        # Nothing happened to the real lease:
        assert kpd.ack(group, [receipt])[0]["status"] == "acked"


def test_long_poll_answers_as_soon_as_a_message_arrives(leader, group, new_topic, kafka_bootstrap):
    topic = new_topic()
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0})
    producer.list_topics(topic, timeout=10)  # connected before timing starts
    with KpdClient(leader.url) as kpd, leader.client() as http:
        assert kpd.pop(group, topic, wait_ms=300) == []  # the group reads the topic from now on
        latencies = []
        for i in range(7):
            answer: list = []
            started = threading.Event()

            def waiting_pop(answer=answer, started=started) -> None:
                started.set()
                answer.append((kpd.pop(group, topic, wait_ms=10_000), time.time()))

            thread = threading.Thread(target=waiting_pop)
            thread.start()
            started.wait()
            wait_for(lambda: parked(http) == 1, 10, "the pop parked")
            producer.produce(topic, f"wake{i}".encode())
            producer.flush(10)
            thread.join(timeout=15)
            [(messages, answered_at)] = answer
            assert [m.value for m in messages] == [f"wake{i}".encode()]
            kpd.ack(group, [messages[0].receipt])
            # From the producer's send (the record's CreateTime) to the pop's answer.
            latencies.append(answered_at - messages[0].timestamp_ms / 1000)
        # The arrival watch (`revive.arrivals`) woke the pop service for most of them (6-7 of 7
        # seen). Not all: the service's own look may find a record first, and once its poll is
        # answered the watch's read of it wakes no one.
        wakes = metric_total(metric_values(http), "kpd_pop_arrival_wakes_total")
    latencies.sort()
    print(f"wake latency after produce: {[round(x * 1000) for x in latencies]} ms; wakes {wakes}")
    assert latencies[len(latencies) // 2] < 0.05  # median within 50 ms
    assert latencies[-1] < 1.0  # and never near the 10 s timeout
    assert wakes is not None and wakes >= len(latencies) // 2


def test_records_arriving_together_wake_parked_polls_in_turn(
    leader, group, new_topic, kafka_bootstrap
):
    """An arrival wakes one parked poll, not all (`cluster.routing.availability`); one that filled
    its batch passes the turn on. Four polls of one message each park, four records come in one
    batch: every poll answers at once with a record of its own, none waits out its 10 s."""
    topic = new_topic()
    with KpdClient(leader.url) as kpd, leader.client() as http:
        assert kpd.pop(group, topic, wait_ms=300) == []  # the group reads the topic from now on
        answers: list[tuple[list, float]] = []

        def waiting_pop() -> None:
            answers.append((kpd.pop(group, topic, max_messages=1, wait_ms=10_000), time.time()))

        threads = [threading.Thread(target=waiting_pop) for _ in range(4)]
        for thread in threads:
            thread.start()
        wait_for(lambda: parked(http) == 4, 10, "four pops parked")
        produced_at = time.time()
        produce(kafka_bootstrap, topic, [f"together-{i}" for i in range(4)])  # one flush
        for thread in threads:
            thread.join(timeout=15)
        values = sorted(m.value for messages, _ in answers for m in messages)
        assert values == [f"together-{i}".encode() for i in range(4)]
        assert [len(messages) for messages, _ in answers] == [1, 1, 1, 1]
        slowest = max(at for _, at in answers) - produced_at
        assert slowest < 2.0, f"the last poll answered {slowest:.1f} s after the records came"
        kpd.ack(group, [m.receipt for messages, _ in answers for m in messages])


def test_restart_honours_leases_and_never_redelivers_acked(
    sidecar_factory, group, new_topic, kafka_bootstrap
) -> None:
    sidecar = sidecar_factory("a").start()
    topic = new_topic()
    produce(kafka_bootstrap, topic, [f"r{i}" for i in range(10)])
    with KpdClient(sidecar.url) as kpd:
        popped = pop_until(kpd, group, topic, 10, invisible_ms=15_000)
        acked = popped[:5]
        assert {r["status"] for r in kpd.ack(group, [m.receipt for m in acked])} == {"acked"}
        lease_end = min(m.invisible_until_ms for m in popped)
    assert sidecar.terminate(signal.SIGTERM) == 0
    sidecar.start()
    with KpdClient(sidecar.url) as kpd:
        early = kpd.pop(group, topic, max_messages=10, wait_ms=1500)
        # A restart takes seconds, well within the 15 s leases: they must still hold.
        assert time.time() * 1000 < lease_end, "the restart outlasted the leases"
        assert early == [], "a lease granted before the restart was broken"
        back = pop_until(kpd, group, topic, 5, invisible_ms=30_000)
        assert time.time() * 1000 >= lease_end  # not before the old leases ended
        assert sorted(m.value for m in back) == sorted(m.value for m in popped[5:])
        assert {m.delivery_count for m in back} == {2}
        assert kpd.pop(group, topic, wait_ms=500) == []  # acked ones never come back
        # Receipts of the lease before the restart: superseded now, not acked.
        assert kpd.ack(group, [popped[5].receipt])[0]["status"] == "superseded"


def test_committed_offsets_are_the_settled_low_watermark(
    leader, group, new_topic, kafka_bootstrap, admin
) -> None:
    topic = new_topic()
    produce(kafka_bootstrap, topic, [f"c{i}" for i in range(10)])

    def committed() -> int:
        return committed_offset(admin, group, topic)

    with KpdClient(leader.url) as kpd, leader.client() as http:
        popped = sorted(
            pop_until(kpd, group, topic, 10, invisible_ms=60_000), key=lambda m: m.offset
        )
        assert [m.offset for m in popped] == list(range(10))
        offsets_sent = metric_values(http).get(OFFSETS_SENT, 0)
        kpd.ack(group, [popped[i].receipt for i in (0, 1, 2, 5)])
        wait_for(lambda: committed() == 3, 10, "committed offset 3")
        # The offsets went into a transaction of their own or of a later step (at most one a
        # second per group), and each such wait on the broker is measured.
        assert metric_values(http)[OFFSETS_SENT] > offsets_sent
        kpd.ack(group, [popped[i].receipt for i in (3, 4)])
        wait_for(lambda: committed() == 6, 10, "committed offset 6 (5 was already acked)")
        kpd.reject(group, [popped[6].receipt])
        kpd.nack(group, [popped[7].receipt], delay_ms=60_000)
        wait_for(lambda: committed() == 8, 10, "rejected and nacked ones count as settled")
        stats = kpd.group(group)["topics"][topic]
        assert stats["in_flight"] == 2
        assert stats["partitions"]["0"]["committed"] == 8


def test_poison_message_does_not_block_others(leader, group, new_topic, kafka_bootstrap) -> None:
    topic = new_topic()
    values = ["poison"] + [f"ok{i}" for i in range(30)]
    produce(kafka_bootstrap, topic, values)
    handled: Counter[bytes] = Counter()
    stop = threading.Event()

    def handler(message) -> None:
        handled[message.value] += 1
        if sum(v for k, v in handled.items() if k != b"poison") >= 30 and handled[b"poison"] >= 3:
            stop.set()
        if message.value == b"poison":
            raise ValueError("cannot handle")

    with KpdClient(leader.url) as kpd:
        # `fast`: backoff 1.5 s, 3 deliveries; the worker nacks the poison each time.
        thread = threading.Thread(
            target=run_worker,
            args=(kpd, group, topic, handler),
            kwargs={"stop": stop, "wait_ms": 500, "invisible_ms": 5000},
        )
        thread.start()
        thread.join(timeout=60)
        assert not thread.is_alive(), "the worker did not finish"
    assert all(handled[f"ok{i}".encode()] == 1 for i in range(30))
    assert handled[b"poison"] == 3
    [dead] = read_all(kafka_bootstrap, leader.dlq_topic(group), 1)
    assert dead.value() == b"poison"


def test_worker_extends_leases_of_slow_handlers(leader, group, new_topic, kafka_bootstrap) -> None:
    topic = new_topic()
    produce(kafka_bootstrap, topic, ["long-job"])
    stop = threading.Event()
    calls: list[int] = []

    def slow(message) -> None:
        calls.append(message.delivery_count)
        # Outlive the 1.5 s invisible time several times over; the worker must keep extending.
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            with KpdClient(leader.url) as other:
                assert other.pop(group, topic, wait_ms=0) == [], "lease lapsed while working"
            time.sleep(0.2)
        stop.set()

    with KpdClient(leader.url) as kpd:
        run_worker(kpd, group, topic, slow, invisible_ms=1500, wait_ms=1000, stop=stop)
        assert calls == [1]
        assert kpd.pop(group, topic, wait_ms=2000) == []  # acked after the long run


def test_auth_size_and_validation_errors(sidecar_factory, group, new_topic) -> None:
    sidecar = sidecar_factory("a", api_token="t0ken-for-tests", max_request_bytes="2048").start()
    topic = new_topic()
    pop_path = f"/v1/groups/{group}/topics/{topic}/pop"
    with sidecar.client() as http:
        assert http.get("/healthz").status_code == 200  # health needs no token
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": "t0ken-for-tests"},
        ):
            answer = http.post(pop_path, json={}, headers=headers)
            assert answer.status_code == 401
            assert answer.json()["code"] == "unauthorized"
            assert answer.headers["www-authenticate"] == "Bearer"
        auth = {"Authorization": "Bearer t0ken-for-tests"}
        assert http.post(pop_path, json={}, headers=auth).status_code == 200
        big = http.post(f"/v1/groups/{group}/ack", json={"receipts": ["r" * 3000]}, headers=auth)
        assert big.status_code == 413 and big.json()["code"] == "request_too_large"
        bad_bodies = [
            ({"max_messages": 0}, "max_messages"),
            ({"max_messages": 1001}, "max_messages"),
            ({"invisible_ms": 999}, "invisible_ms"),
            ({"invisible_ms": 43_200_001}, "invisible_ms"),
            ({"wait_ms": 20_001}, "wait_ms"),
            ({"wait_ms": -1}, "wait_ms"),
            ({"max_messages": "ten"}, "max_messages"),
            ({"unexpected": 1}, "unexpected"),
        ]
        for body, field in bad_bodies:
            answer = http.post(pop_path, json=body, headers=auth)
            assert answer.status_code == 422, body
            assert answer.headers["content-type"] == "application/problem+json"
            assert any(field in e["field"] for e in answer.json()["errors"]), answer.json()
        bounds = http.post(pop_path, json={"max_messages": 0}, headers=auth).json()["errors"][0]
        assert bounds["bounds"] == {"ge": 1}
        for path, body in [
            (f"/v1/groups/{group}/ack", {"receipts": []}),
            (f"/v1/groups/{group}/nack", {"items": [{"receipt": "r", "delay_ms": -5}]}),
            (f"/v1/groups/{group}/leases", {"items": [{"receipt": "r"}]}),
            (f"/v1/groups/{group}/reject", {"items": "nope"}),
            ("/v1/groups/bad%20group/ack", {"receipts": ["r"]}),
        ]:
            assert http.post(path, json=body, headers=auth).status_code == 422, path
        garbage = http.post(
            pop_path, content=b"{not json", headers={**auth, "content-type": "application/json"}
        )
        assert garbage.status_code == 422
        missing = http.post(f"/v1/groups/{group}/topics/no-such-topic/pop", json={}, headers=auth)
        assert missing.status_code == 404 and missing.json()["code"] == "topic_not_found"


def test_any_sidecar_pops_and_settles_lanes_led_elsewhere(
    sidecar_factory, group, new_topic, kafka_bootstrap
):
    a = sidecar_factory("a").start()
    b = sidecar_factory("b").start()
    topic = new_topic(partitions=4)  # lanes on both shards, so on both sidecars
    values = [f"m{i}" for i in range(40)]
    produce(kafka_bootstrap, topic, values)
    with KpdClient(a.url) as via_a, KpdClient(b.url) as via_b:
        wait_for(lambda: led_shards(a) and led_shards(b), 30, "each sidecar leads a shard")
        popped = pop_until(via_a, group, topic, len(values))
        assert sorted(m.value for m in popped) == sorted(v.encode() for v in values)
        assert len({m.partition for m in popped}) == 4  # every lane, whoever leads it
        # Receipts of a's pops settle through b: each reaches its shard's leader.
        results = via_b.ack(group, [m.receipt for m in popped])
        assert [r["status"] for r in results] == ["acked"] * len(popped)
        assert via_b.pop(group, topic, max_messages=10, wait_ms=500) == []

        def lags() -> set[int]:
            return {p["lag"] for p in via_b.group(group)["topics"][topic]["partitions"].values()}

        # Each shard commits the group's offsets within about a second of the acks.
        wait_for(lambda: lags() == {0}, 10, "lag 0 on every partition")
        stats = via_b.group(group)["topics"][topic]
        assert len(stats["partitions"]) == 4 and stats["in_flight"] == 0


def test_standby_takes_over_pops_after_the_leader_is_killed(
    sidecar_factory, group, new_topic, kafka_bootstrap
) -> None:
    first = sidecar_factory("a", shards="1").start()  # one shard: a leads it
    standby = sidecar_factory("b", shards="1").start()
    topic = new_topic()
    produce(kafka_bootstrap, topic, [f"f{i}" for i in range(20)])
    with KpdClient(first.url) as kpd:
        assert led_shards(first) == {0} and led_shards(standby) == set()  # b stands by
        popped = pop_until(kpd, group, topic, 20, invisible_ms=5000)
        kpd.ack(group, [m.receipt for m in popped[:10]])
    first.terminate(signal.SIGKILL)
    killed_at = time.monotonic()
    with KpdClient(standby.url) as kpd:
        wait_for(lambda: led_shards(standby) == {0}, 60, "b takes over")
        takeover_s = time.monotonic() - killed_at
        back = pop_until(kpd, group, topic, 10, invisible_ms=30_000)
        assert sorted(m.value for m in back) == sorted(m.value for m in popped[10:])
        assert {m.delivery_count for m in back} == {2}
        lease_ends = {m.value: m.invisible_until_ms for m in popped}
        for message in back:  # each retry copy was written once its lease had ended
            assert message.timestamp_ms >= lease_ends[message.value]
        assert kpd.pop(group, topic, wait_ms=1000) == []  # acked ones never come back
        assert {r["status"] for r in kpd.ack(group, [m.receipt for m in back])} == {"acked"}
    with standby.client() as http:  # leased before the takeover: read back from Kafka to copy
        assert metric_values(http)["kpd_pop_copy_reads_total"] == 10
    print(f"pop takeover after SIGKILL: {takeover_s:.1f} s")
    assert takeover_s < 30


def test_leases_on_a_deleted_topic_do_not_hold_the_replay_floor(
    sidecar_factory, group, new_topic, kafka_bootstrap, admin
) -> None:
    """A topic deleted while its messages are leased: a new leader drops those leases (nothing
    of the topic can be fetched or settled again) instead of replaying them for good."""
    sidecar = sidecar_factory("a", shards="1").start()
    topic = new_topic()
    produce(kafka_bootstrap, topic, ["d0", "d1"])
    with KpdClient(sidecar.url) as kpd:
        assert len(pop_until(kpd, group, topic, 2, invisible_ms=600_000)) == 2
    admin.delete_topics([topic])[topic].result(timeout=30)
    wait_for(lambda: topic not in admin.list_topics(timeout=10).topics, 30, "topic deleted")
    assert sidecar.terminate(signal.SIGTERM) == 0
    sidecar.start()
    prefix = sidecar.env["KPD_STATE_TOPIC_PREFIX"]
    wait_for(lambda: floor_moved(admin, prefix), 15, "the floor passed the deleted topic's leases")


def test_a_standby_forgets_the_checkpoints_its_leader_released(
    sidecar_factory, group, new_topic, kafka_bootstrap
) -> None:
    """A standby places every checkpoint it reads (a takeover's replay floor needs them) and
    forgets those below the floor its leader commits, so its memory does not grow with pops."""
    first = sidecar_factory("a", shards="1").start()
    standby = sidecar_factory("b", shards="1").start()
    topic = new_topic()
    produce(kafka_bootstrap, topic, [f"s{i}" for i in range(40)])

    def placed(http) -> float | None:
        return metric_values(http).get("kpd_pop_standby_checkpoints")

    with KpdClient(first.url) as kpd, standby.client() as http:
        wait_for(lambda: standby_shards(standby) == {0}, 60, "b follows shard 0")
        popped, checkpoints = [], 0
        while len(popped) < 40:
            batch = kpd.pop(group, topic, max_messages=10, wait_ms=2000, invisible_ms=60_000)
            popped, checkpoints = popped + batch, checkpoints + bool(batch)
        wait_for(lambda: placed(http) == checkpoints, 15, f"b places the {checkpoints} leases")
        assert {r["status"] for r in kpd.ack(group, [m.receipt for m in popped])} == {"acked"}
        wait_for(lambda: placed(http) == 0, 15, "b forgets them once the floor passed them")


def test_acks_taken_by_a_new_leader_reach_the_group_offset(
    sidecar_factory, group, new_topic, kafka_bootstrap, admin
) -> None:
    """Every message is popped before the takeover and acked after it: no later record of the
    group moves its offset, so the new leader must commit the recovered acks by itself."""
    first = sidecar_factory("a", shards="1").start()
    standby = sidecar_factory("b", shards="1").start()
    topic = new_topic()
    produce(kafka_bootstrap, topic, [f"t{i}" for i in range(10)])
    with KpdClient(first.url) as kpd:
        popped = pop_until(kpd, group, topic, 10, invisible_ms=60_000)
    first.terminate(signal.SIGKILL)
    with KpdClient(standby.url) as kpd:
        wait_for(lambda: led_shards(standby) == {0}, 60, "b takes over")
        assert {r["status"] for r in kpd.ack(group, [m.receipt for m in popped])} == {"acked"}
        assert kpd.pop(group, topic, wait_ms=500) == []  # workers keep asking; nothing is left
        wait_for(lambda: committed_offset(admin, group, topic) == 10, 15, "committed offset 10")
        assert kpd.group(group)["topics"][topic]["partitions"]["0"]["lag"] == 0


def test_leases_a_new_leader_revived_before_any_pop_never_return_as_first_deliveries(
    sidecar_factory, group, new_topic, kafka_bootstrap, admin
) -> None:
    """A new leader revives its predecessor's leases before any worker asks it for the group.
    The leader after it must still know those deliveries: their retry copies come back, never
    the originals as first deliveries (CI saw that after broker outages: the replay floor had
    passed the checkpoints while the group's committed offset had not)."""
    sidecar = sidecar_factory("a", shards="1", election_session_timeout_ms="2000").start()
    prefix = sidecar.env["KPD_STATE_TOPIC_PREFIX"]
    topic = new_topic()
    values = [f"v{i}" for i in range(5)]
    produce(kafka_bootstrap, topic, values)
    with KpdClient(sidecar.url) as kpd:
        popped = pop_until(kpd, group, topic, 5, invisible_ms=2000)
    assert sorted(m.value for m in popped) == sorted(v.encode() for v in values)
    sidecar.terminate(signal.SIGKILL)
    sidecar.start()  # replays the leases; they expire with no worker asking for the group
    copies = read_all(kafka_bootstrap, f"{prefix}retry.{group}", 5)
    assert sorted(m.value() for m in copies) == sorted(m.value for m in popped)

    wait_for(lambda: floor_moved(admin, prefix), 30, "the floor passed the revived checkpoint")
    sidecar.terminate(signal.SIGKILL)
    sidecar.start()
    with KpdClient(sidecar.url) as kpd:
        back = pop_until(kpd, group, topic, 5, invisible_ms=30_000)
        assert sorted(m.value for m in back) == sorted(m.value for m in popped)
        assert {m.delivery_count for m in back} == {2}, "an original came back as a first delivery"
        assert kpd.pop(group, topic, wait_ms=1000) == []


def test_the_client_spreads_calls_over_sidecars_and_skips_a_dead_one(
    sidecar_factory, group, new_topic, kafka_bootstrap
):
    """Two live sidecars, an address where nothing listens (refused), and one whose host answers
    no connect (a listener whose backlog is full: the kernel drops further connects, as a gone
    host's network does). Calls that come to the last two go on to the next sidecar: a refused
    one at once, a silent one after the client's connect timeout, where it held the call for the
    whole call timeout before."""
    a, b = sidecar_factory("a").start(), sidecar_factory("b").start()
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    topic = new_topic(partitions=2)
    values = [f"spread-{i}" for i in range(20)]
    produce(kafka_bootstrap, topic, values)
    with (
        silent_host() as silent,
        KpdClient([a.url, dead, silent, b.url], connect_timeout_s=0.5) as kpd,
    ):
        popped = []
        while len(popped) < len(values):
            popped += kpd.pop(group, topic, max_messages=3, wait_ms=1000)
        assert sorted(m.value for m in popped) == sorted(v.encode() for v in values)
        assert {r["status"] for r in kpd.ack(group, [m.receipt for m in popped])} == {"acked"}
    for sidecar in (a, b):  # both answered pops: the client went to each in turn
        with sidecar.client() as http:
            assert metric_values(http)["kpd_pop_request_seconds_count{call=pop}"] > 0


@contextlib.contextmanager
def silent_host() -> Iterator[str]:
    """The URL of a listener that answers no connect: its backlog (of 1) is full."""
    with socket.create_server(("127.0.0.1", 0), backlog=0) as listener:
        port = listener.getsockname()[1]
        held = [socket.socket() for _ in range(3)]
        try:
            for client in held:
                client.setblocking(False)
                client.connect_ex(("127.0.0.1", port))
            with pytest.raises(TimeoutError):  # a connect now waits in vain
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            yield f"http://127.0.0.1:{port}"
        finally:
            for client in held:
                client.close()


def test_the_client_skips_a_sidecar_that_takes_calls_and_gives_no_answer(
    sidecar_factory, group, new_topic, kafka_bootstrap
):
    """A sidecar paused (SIGSTOP), frozen, or cut off behind an open connection takes a call and
    never answers: it held each call that came to it for the whole call timeout, then failed it.
    The client sends a pop or an ack on to the next sidecar once the answer is overdue, and asks
    the mute one last for a while. A produce is not sent again: its plain messages may have been
    written, and would be twice."""
    a = sidecar_factory("a").start()
    topic = new_topic(partitions=2)
    values = [f"mute-{i}" for i in range(20)]
    produce(kafka_bootstrap, topic, values)
    with mute_host() as (mute, calls_taken), KpdClient([mute, a.url], timeout_s=2) as kpd:
        popped = kpd.pop(group, topic, max_messages=20, wait_ms=1000)  # the mute one's turn
        assert calls_taken() == 1
        while len(popped) < len(values):  # each in turn again: the mute one is asked last
            popped += kpd.pop(group, topic, max_messages=3, wait_ms=1000)
        assert sorted(m.value for m in popped) == sorted(v.encode() for v in values)
        assert {r["status"] for r in kpd.ack(group, [m.receipt for m in popped])} == {"acked"}
        assert calls_taken() == 1
    with mute_host() as (mute, calls_taken), KpdClient([mute, a.url], timeout_s=2) as kpd:
        with pytest.raises(httpx.ReadTimeout):
            kpd.produce(topic, [{"value": "once"}])
        assert calls_taken() == 1


@contextlib.contextmanager
def mute_host() -> Iterator[tuple[str, Callable[[], int]]]:
    """The URL of a listener that takes connections and reads calls but never answers (as a
    paused process's kernel does), and how many calls it took so far."""
    taken: list[socket.socket] = []
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(0.1)
        stop = threading.Event()

        def take() -> None:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    connection, _ = listener.accept()
                    connection.settimeout(5)
                    if connection.recv(65536):  # a call came; it is never answered
                        taken.append(connection)

        taker = threading.Thread(target=take, daemon=True)
        taker.start()
        try:
            yield f"http://127.0.0.1:{listener.getsockname()[1]}", lambda: len(taken)
        finally:
            stop.set()
            taker.join()
            for connection in taken:
                connection.close()


@pytest.mark.parametrize("removal", ["records", "topic"])
def test_a_leased_record_removed_from_its_partition_does_not_stall_the_shard(
    removal, sidecar_factory, group, new_topic, kafka_bootstrap, admin
) -> None:
    """A leased record deleted before its lease expires (retention or delete-records, or its
    whole topic): revive finds it gone at once, instead of reading the partition until its Kafka
    timeout while every pop of the shard waits."""
    sidecar = sidecar_factory("a", shards="1").start()  # one shard: the pops below share it
    topic, other = new_topic(), new_topic()
    produce(kafka_bootstrap, topic, ["removed"])
    produce(kafka_bootstrap, other, [f"o{n}" for n in range(2000)])
    with KpdClient(sidecar.url) as kpd:
        assert len(kpd.pop(group, other, max_messages=1, wait_ms=5000, invisible_ms=600_000)) == 1
        [leased] = pop_until(kpd, group, topic, 1, invisible_ms=2000)
        with sidecar.client() as http:
            restarts_before = leader_restarts(http)
        if removal == "records":
            removed = admin.delete_records([TopicPartition(topic, 0, 1)])
        else:
            removed = admin.delete_topics([topic])
        for future in removed.values():
            future.result(timeout=30)
        slowest, end = 0.0, leased.invisible_until_ms / 1000 + 5
        while time.time() < end:  # through the lease's expiry and its revive
            started = time.monotonic()
            kpd.pop(group, other, max_messages=1, wait_ms=0, invisible_ms=600_000)
            slowest = max(slowest, time.monotonic() - started)
        assert slowest < 2.0, f"a pop waited {slowest:.1f} s behind the revive of a gone record"
        with sidecar.client() as http:  # no step failed over it: a deletion is not a fault
            assert leader_restarts(http) == restarts_before
        if removal == "records":
            assert kpd.pop(group, topic, wait_ms=1000) == []  # revived as gone: none comes back
