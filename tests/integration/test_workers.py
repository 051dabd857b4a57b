"""Several worker processes behind one `kpd run` (every core working), over real HTTP and Kafka."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import orjson
from kafka_helpers import (
    TopicReader,
    assert_exactly_once,
    buffer_record,
    led_shards,
    make_producer,
    metric_values,
    now_ms,
    produce_all,
    two_free_ports,
    unique,
    wait_for,
)

from cluster.routing.pop_turns import CLIENTS_SEEN_S, REMOTE_FIRST_EVERY
from kpd_client import KpdClient


def test_workers_share_the_shards_the_port_and_the_metrics(
    sidecar_factory, new_topic, kafka_bootstrap
):
    sidecar = sidecar_factory("w", workers="2", shards="4").start()
    assert len(sidecar.worker_pids()) == 2
    wait_for(lambda: led_shards(sidecar) == {0, 1, 2, 3}, 60, "the workers lead every shard")
    target, topic, group = new_topic("out"), new_topic("work", partitions=4), unique("g")
    ids = [f"w-{i}" for i in range(400)]
    records = [buffer_record(target, value=b"x", delay_ms=0, schedule_id=i) for i in ids]
    produce_all(make_producer(kafka_bootstrap), sidecar.env["KPD_BUFFER_TOPIC"], records)
    produce_all(
        make_producer(kafka_bootstrap), topic, [(None, f"j{i}".encode(), []) for i in range(40)]
    )
    with TopicReader(kafka_bootstrap, target) as reader:
        messages = reader.read_count(len(ids), 60)
        assert_exactly_once(reader.read_for(1.0), set(ids))
    with KpdClient(sidecar.url) as kpd:
        popped = []
        while len(popped) < 40:
            popped += kpd.pop(group, topic, max_messages=40, wait_ms=1000)
        assert {r["status"] for r in kpd.ack(group, [m.receipt for m in popped])} == {"acked"}
    log = sidecar.env["KPD_DELIVERY_LOG_TOPIC"]
    with TopicReader(kafka_bootstrap, log) as reader:
        events = reader.read_until(lambda m: len(m) >= 2 * len(messages), 60, "log events")
    nodes = {event.value().split(b'"node":"')[1].split(b'"')[0] for event in events}
    assert nodes == {b"w-0", b"w-1"}  # both workers wrote: each leads shards
    with sidecar.client() as http:  # one /metrics for both workers, whichever answers
        values = metric_values(http)
        assert values["kpd_schedules_delivered_total"] >= len(ids)
        assert sum(v for k, v in values.items() if k.startswith("kpd_shard_leader{")) == 4
        # The standbys' CPU is counted, summed over both workers (what it is made of is
        # tests/unit/test_standby_housekeeping.py's).
        assert values["kpd_standby_cpu_seconds_total"] > 0


def test_a_killed_worker_is_started_again(sidecar_factory):
    sidecar = sidecar_factory("w", workers="2", shards="4").start()
    wait_for(lambda: led_shards(sidecar) == {0, 1, 2, 3}, 60, "the workers lead every shard")
    victim = sidecar.worker_pids()[0]
    os.kill(victim, signal.SIGKILL)
    started = now_ms()
    wait_for(
        lambda: len(sidecar.worker_pids()) == 2 and victim not in sidecar.worker_pids(), 30,
        "a new worker in its place",
    )  # fmt: skip
    wait_for(lambda: led_shards(sidecar) == {0, 1, 2, 3}, 60, "every shard led again")
    print(f"\nworker replaced and every shard led {now_ms() - started} ms after the kill")
    assert sidecar.running()


def test_the_sidecar_is_ready_once_every_worker_is(sidecar_factory):
    """Health checks reach whichever worker accepts on the shared port: when one answers ready,
    every worker of the sidecar must be (`make up` and compose wait for that answer)."""
    base = two_free_ports()
    sidecar_factory("w", workers="2", shards="4", worker_port_base=str(base)).start()
    answers = [httpx.get(f"http://127.0.0.1:{p}/readyz", timeout=5) for p in (base, base + 1)]
    assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]


def test_a_pop_its_worker_leased_elsewhere_asks_the_client_to_reconnect(
    sidecar_factory, new_topic, kafka_bootstrap
):
    """A client of the shared port lands on whichever worker accepts its connection. When that
    worker's lanes have nothing and it leases from another worker's, the answer closes the
    connection, so the client's next one may land where the records are; an answer from the
    worker's own lanes keeps it. A peer's forwarded call (on the worker's own port) never closes."""
    base = two_free_ports()
    sidecar = sidecar_factory("w", workers="2", shards="2", worker_port_base=str(base)).start()
    wait_for(lambda: led_shards(sidecar) == {0, 1}, 60, "the workers lead every shard")
    topic, group = new_topic("work", partitions=1), unique("g")  # one lane: one owner
    produce_all(
        make_producer(kafka_bootstrap), topic, [(None, f"j{i}".encode(), []) for i in range(80)]
    )
    path, pop = f"/v1/groups/{group}/topics/{topic}/pop", {"max_messages": 1, "wait_ms": 5000}
    rounds: list[tuple[str, int, str | None]] = []  # (the connection's worker, offset, header)
    deadline = time.monotonic() + 60
    while len({node for node, *_ in rounds}) < 2 and time.monotonic() < deadline:
        with httpx.Client(base_url=sidecar.url, timeout=30) as http:  # a new connection
            stats, answer = http.get(f"/v1/groups/{group}"), http.post(path, json=pop)
        if 503 in (stats.status_code, answer.status_code):  # a shard moving between the workers
            time.sleep(float(answer.headers.get("retry-after", "0.5")))
            continue
        (message,) = answer.json()["messages"]
        rounds.append((stats.json()["node"], message["offset"], answer.headers.get("connection")))
    assert {node for node, *_ in rounds} == {"w-0", "w-1"}, rounds
    log = sidecar.env["KPD_DELIVERY_LOG_TOPIC"]
    with TopicReader(kafka_bootstrap, log) as reader:
        events = reader.read_until(lambda m: len(m) >= len(rounds), 60, "pop log events")
    records = [orjson.loads(event.value()) for event in events]
    leased_by = {r["offset"]: r["node"] for r in records if r["target"] == topic}
    for node, offset, connection in rounds:  # closed when another worker leased it
        assert (connection == "close") == (node != leased_by[offset]), rounds
    owner = leased_by[rounds[-1][1]]
    other = 1 - int(owner[-1])
    with httpx.Client(base_url=f"http://127.0.0.1:{base + other}", timeout=30) as http:
        before = metric_values(http)["kpd_pop_forwarded_total{call=pop}"]
        answer = http.post(path, json=pop)  # leased by the owner, through the worker's own port
        assert len(answer.json()["messages"]) == 1
        assert metric_values(http)["kpd_pop_forwarded_total{call=pop}"] == before + 1
        assert answer.headers.get("connection") != "close"


def test_a_worker_asks_the_other_first_only_while_no_client_pops_there(
    sidecar_factory, new_topic, kafka_bootstrap
):
    """A worker asks its own shards first, and the other worker first on one pop in
    REMOTE_FIRST_EVERY, so that lanes no client reaches do not starve. Lanes that clients pop at
    their own worker need no such turn (`cluster.routing.pop_turns`): a worker told so asks the
    other first again only once CLIENTS_SEEN_S has passed. A group that clients pop at one worker
    only keeps every such turn."""
    base = two_free_ports()
    sidecar = sidecar_factory("w", workers="2", shards="4", worker_port_base=str(base)).start()
    wait_for(lambda: led_shards(sidecar) == {0, 1, 2, 3}, 60, "the workers lead every shard")
    topic, partitions, pops = new_topic("work", partitions=8), 8, 240
    # 8 partitions over 4 shards: every shard serves lanes of each group (`lane_partition`).
    both, one = unique("g"), unique("g")
    producer = make_producer(kafka_bootstrap)
    for partition in range(partitions):
        produce_all(producer, topic, [(None, b"j", [])] * (pops // 2), partition=partition)
    body = {"max_messages": 1, "invisible_ms": 600_000, "wait_ms": 5000}  # waits while reading

    def popper(port: int, group: str, count: int = pops) -> None:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            for _ in range(count):
                answer = http.post(f"/v1/groups/{group}/topics/{topic}/pop", json=body)
                assert len(answer.json()["messages"]) == 1, answer.text

    def forwarded_pops() -> float:
        with sidecar.client() as http:  # both workers' counts, summed
            return metric_values(http).get("kpd_pop_forwarded_total{call=pop}", 0.0)

    for port in (base, base + 1):  # each worker's shards read `both` (the first pops wait)
        popper(port, both, 1)
    before, started = forwarded_pops(), time.monotonic()
    with ThreadPoolExecutor(2) as pool:  # clients pop `both` at each worker's own port
        list(pool.map(popper, (base, base + 1), (both, both)))
    elapsed_s, forwarded = time.monotonic() - started, forwarded_pops() - before
    # Per worker: turns before the other's first word, then one turn per CLIENTS_SEEN_S.
    bound = 2 * (2 + elapsed_s / CLIENTS_SEEN_S)
    every_turn = 2 * (pops // REMOTE_FIRST_EVERY)
    print(f"\n{forwarded:.0f} pops forwarded of {2 * pops} in {elapsed_s:.1f} s")
    assert bound < every_turn, f"too slow to tell: {2 * pops} pops took {elapsed_s:.1f} s"
    assert forwarded <= bound
    before = forwarded_pops()
    popper(base, one)  # clients pop `one` at worker 0 only: worker 1's lanes get every turn
    # (and a first pop that found nothing read yet may have asked worker 1 more)
    assert forwarded_pops() - before >= pops // REMOTE_FIRST_EVERY
