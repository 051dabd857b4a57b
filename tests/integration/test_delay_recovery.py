"""Crashes, lost RocksDB folders and failover: nothing lost, nothing delivered twice.

Counts are read with `read_committed` consumers, as principle 3 promises them. The election session
timeout is lowered to 2 s to keep the suite fast (the local broker allows down to 1 s; against an
external cluster whose `group.min.session.timeout.ms` is higher, raise it).
"""

from __future__ import annotations

import shutil
import signal
import time

import httpx
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_helpers import (
    TopicReader,
    assert_exactly_once,
    assert_never_early,
    buffer_record,
    delivered_ids,
    log_events,
    make_producer,
    metric_total,
    metric_values,
    now_ms,
    produce_all,
    unique,
    wait_delivering,
    wait_for,
)

from foundation.kafka_clients import release_producer, transactional_producer

SESSION_TIMEOUT_MS = "2000"


def _backlog(target: str, prefix: str, n: int, start_ms: int, span_ms: int) -> list:
    return [
        buffer_record(
            target,
            value=f"{prefix}-{i}".encode(),
            deliver_at=start_ms + i * span_ms // n,
            schedule_id=f"{prefix}-{i}",
        )
        for i in range(n)
    ]


def _pending(http: httpx.Client) -> float | None:
    return metric_total(metric_values(http), "kpd_schedules_pending")


def test_sigkill_mid_backlog_and_restart(sidecar_factory, new_topic, kafka_bootstrap):
    sidecar = sidecar_factory("a", election_session_timeout_ms=SESSION_TIMEOUT_MS).start()
    buffer = sidecar.env["KPD_BUFFER_TOPIC"]
    target = new_topic("kill")
    with sidecar.client() as http:
        wait_delivering(http, new_topic("warm"))
    n = 3000
    producer = make_producer(kafka_bootstrap)
    produce_all(producer, buffer, _backlog(target, "kill", n, now_ms() + 1500, 3000))
    expected = {f"kill-{i}" for i in range(n)}

    with TopicReader(kafka_bootstrap, target) as reader:
        reader.read_until(lambda m: len(m) >= n // 3, 30, "a third delivered")
        sidecar.terminate(signal.SIGKILL)
        at_kill = len(reader.messages)
        # Records arriving while no sidecar runs are picked up after the restart.
        produce_all(producer, buffer, _backlog(target, "down", 500, now_ms(), 1))
        expected |= {f"down-{i}" for i in range(500)}
        restarted_at = time.monotonic()
        sidecar.start()
        reader.read_count(len(expected), 90)
        recovered_s = time.monotonic() - restarted_at
        messages = reader.read_for(1.0)
    print(f"\nkilled with {at_kill}/{n} delivered; all delivered {recovered_s:.1f} s after restart")
    assert at_kill < n, "the kill came after the backlog had drained"
    assert_exactly_once(messages, expected)
    assert_never_early(messages)

    with TopicReader(kafka_bootstrap, target, isolation="read_uncommitted") as raw:
        raw_count = len(raw.read_count(len(expected), 30))
    # Aborted records of the killed transaction are visible here only; informative.
    print(f"read_uncommitted sees {raw_count} records for {len(expected)} committed")


def test_rocksdb_deleted_while_stopped_is_rebuilt_from_kafka(
    sidecar_factory, new_topic, kafka_bootstrap
):
    sidecar = sidecar_factory("a").start()
    buffer = sidecar.env["KPD_BUFFER_TOPIC"]
    target = new_topic("rebuild")
    producer = make_producer(kafka_bootstrap)
    produce_all(producer, buffer, _backlog(target, "early", 200, now_ms(), 1))
    early = {f"early-{i}" for i in range(200)}
    with TopicReader(kafka_bootstrap, target) as reader:
        reader.read_count(200, 30)
        produce_all(producer, buffer, _backlog(target, "late", 200, now_ms() + 6000, 500))
        late = {f"late-{i}" for i in range(200)}
        with sidecar.client() as http:
            wait_for(
                lambda: http.get("/v1/schedules/late-199").json().get("state") == "scheduled",
                10,
                "late ones scheduled",
            )
            assert http.get("/v1/schedules/early-0").json()["state"] == "delivered"
            wait_for(lambda: _pending(http) == 200, 10, "200 pending over the shards")
        assert sidecar.terminate(signal.SIGTERM) == 0
        assert set(delivered_ids(reader.messages)) == early, "late ones delivered before due"

        stores = sidecar.data_dir / "shards"
        assert stores.is_dir()
        shutil.rmtree(sidecar.data_dir)
        sidecar.start()
        assert stores.is_dir()
        with sidecar.client() as http:
            states = {i: http.get(f"/v1/schedules/{i}").json().get("state") for i in early | late}
            assert {states[i] for i in early} == {"delivered"}
            assert {states[i] for i in late} <= {"scheduled", "delivered"}
            reader.read_count(400, 30)
            messages = reader.read_for(1.0)
            wait_for(
                lambda: http.get("/v1/schedules/late-199").json().get("state") == "delivered",
                10,
                "late ones delivered",
            )
            wait_for(lambda: _pending(http) == 0, 10, "none pending")
    assert_exactly_once(messages, early | late)
    assert_never_early(messages)


def _pending_by_shard(http: httpx.Client) -> dict[str, float]:
    prefix = "kpd_schedules_pending{shard="
    return {k[len(prefix) : -1]: v for k, v in metric_values(http).items() if k.startswith(prefix)}


def _made_before_shards(env: dict[str, str], admin: AdminClient, partitions: int) -> None:
    """The state topics of a deployment made before shards: one election partition (one shard)
    over state topics of several partitions."""
    prefix = env["KPD_STATE_TOPIC_PREFIX"]
    counts = {"leader": 1, "schedules": partitions, "pop-state": partitions, "delay-inbox": 1}
    config = {"schedules": {"cleanup.policy": "compact"}}
    topics = [NewTopic(prefix + n, c, 1, config=config.get(n, {})) for n, c in counts.items()]
    for future in admin.create_topics(topics).values():
        future.result(30)


@pytest.mark.parametrize("layout", ["one partition per shard", "made before shards"])
def test_a_restart_counts_each_pending_schedule_once(
    sidecar_factory, new_topic, kafka_bootstrap, layout
):
    """A leader notes where its index stands from some of its records only, so a restarted one
    reads its last records again: each schedule still pending among them is counted once (the
    restart counted 446 of 300 before `delay_service.schedule_follower` read such ids first).
    Where a shard has several partitions, the leader notes every record's offset."""
    n, shards = 300, 4 if layout == "one partition per shard" else 1
    # One worker: no shard moves between workers, whose gauges overlap while one hands over.
    sidecar = sidecar_factory("a", shards=str(shards), workers="1")
    if layout == "made before shards":
        _made_before_shards(sidecar.env, AdminClient({"bootstrap.servers": kafka_bootstrap}), 3)
    sidecar.start()
    buffer = sidecar.env["KPD_BUFFER_TOPIC"]
    produce_all(
        make_producer(kafka_bootstrap),
        buffer,
        _backlog(new_topic("later"), "later", n, now_ms() + 3_600_000, 1000),
    )

    def counted(http: httpx.Client) -> bool:
        by_shard = _pending_by_shard(http)  # a shard's count shows once its leader has started
        return len(by_shard) == shards and sum(by_shard.values()) == n

    with sidecar.client() as http:
        wait_for(lambda: counted(http), 30, f"{n} pending")
    assert sidecar.terminate(signal.SIGTERM) == 0
    sidecar.start()
    with sidecar.client() as http:
        wait_for(lambda: len(_pending_by_shard(http)) == shards, 30, "every shard's leader")
        assert sum(_pending_by_shard(http).values()) == n


def test_failover_to_the_standby_mid_backlog(sidecar_factory, new_topic, kafka_bootstrap):
    nodes = {  # one shard: one leader, one standby
        name: sidecar_factory(
            name, election_session_timeout_ms=SESSION_TIMEOUT_MS, shards="1"
        ).start()
        for name in ("a", "b")
    }

    def leaders() -> list[str]:
        found = []
        for name, node in nodes.items():
            with node.client() as http:
                if metric_values(http).get("kpd_leader") == 1:
                    found.append(name)
        return found

    (leader_name,) = wait_for(lambda: leaders() if len(leaders()) == 1 else None, 30, "a leader")
    standby_name = "b" if leader_name == "a" else "a"
    leader, standby = nodes[leader_name], nodes[standby_name]
    buffer = leader.env["KPD_BUFFER_TOPIC"]
    assert standby.env["KPD_BUFFER_TOPIC"] == buffer  # one namespace, shared topics
    target = new_topic("failover")
    with leader.client() as http:
        wait_delivering(http, new_topic("warm"))

    n = 3000
    produce_all(
        make_producer(kafka_bootstrap), buffer, _backlog(target, "fo", n, now_ms() + 1500, 3000)
    )
    expected = {f"fo-{i}" for i in range(n)}
    with TopicReader(kafka_bootstrap, target) as reader:
        reader.read_until(lambda m: len(m) >= n // 3, 30, "a third delivered")
        leader.terminate(signal.SIGKILL)
        killed_ms = now_ms()
        at_kill = len(reader.messages)
        with standby.client() as http:
            wait_for(lambda: metric_values(http)["kpd_leader"] == 1, 30, "standby leads")
            elected_ms = now_ms()
            # The standby's index was hot: it answers for the schedules the old leader wrote.
            assert http.get(f"/v1/schedules/fo-{n - 1}").json()["state"] in {
                "scheduled",
                "delivered",
            }
        reader.read_count(n, 60)
        messages = reader.read_for(1.0)
    assert at_kill < n, "the kill came after the backlog had drained"
    assert_exactly_once(messages, expected)
    assert_never_early(messages)

    with TopicReader(kafka_bootstrap, leader.env["KPD_DELIVERY_LOG_TOPIC"]) as log_reader:
        log_reader.read_until(
            lambda ms: sum(b'"delivered"' in m.value() and b'"fo-' in m.value() for m in ms) >= n,
            30,
            "delivery log",
        )
        events = [
            e
            for e in log_events(log_reader.read_for(0.5))
            if e["event"] == "delivered" and e["id"].startswith("fo-")
        ]
    assert len(events) == n and len({e["id"] for e in events}) == n
    by_node = {name: sum(e["node"] == name for e in events) for name in nodes}
    assert by_node[leader_name] > 0 and by_node[standby_name] > 0, by_node
    first_by_standby = min(e["at_ms"] for e in events if e["node"] == standby_name)
    print(
        f"\nfailover {leader_name} -> {standby_name}: killed with {at_kill}/{n} delivered; "
        f"standby elected after {elected_ms - killed_ms} ms, first delivery after "
        f"{first_by_standby - killed_ms} ms (session timeout {SESSION_TIMEOUT_MS} ms); "
        f"deliveries by node {by_node}"
    )


def test_a_fenced_leaders_producer_is_let_go_quietly(new_topic, kafka_bootstrap) -> None:
    """A role whose producer a newer leader fenced stops; releasing that producer must not fail
    (it has nothing it may send) so the stop is not reported as a second failure."""
    config, topic, txn_id = {"bootstrap.servers": kafka_bootstrap}, new_topic(), unique("txn")
    zombie = transactional_producer(config, txn_id)
    zombie.init_transactions(10)
    zombie.begin_transaction()
    zombie.produce(topic, b"never visible")
    transactional_producer(config, txn_id).init_transactions(10)  # the new leader fences it
    with pytest.raises(KafkaException) as fenced:
        zombie.commit_transaction(10)
    assert fenced.value.args[0].fatal()
    release_producer(zombie)
