"""Shards across three sidecars (issue: scale out by shard), real broker, real sidecars.

Schedules are produced unkeyed, so most land on a buffer partition of another shard than their
id's and are re-keyed; pop lanes are spread over every sidecar. Exactly once, never early, cancel
wins, the first schedule of an id wins, pops are exclusive with exact delivery counts; and the
same holds while a sidecar joins, or a shard owner is killed or paused, under load.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections import Counter

import pytest
from kafka_helpers import (
    TopicReader,
    assert_exactly_once,
    assert_never_early,
    buffer_record,
    led_shards,
    log_events,
    make_producer,
    metric_values,
    now_ms,
    pop_all,
    produce_all,
    produce_spread,
    standby_shards,
    unique,
    wait_for,
)
from load_helpers import DelayLoad, PopLoad
from store_helpers import held_stores

from cluster.routing.forwarding import FORWARDED
from delay_service.schedules import COLUMN_FAMILIES, ScheduleIndex
from foundation.shards import ShardMap
from foundation.state_follower import OFFSETS_CF
from kpd_client import KpdClient, KpdError

pytestmark = pytest.mark.timeout(600)
SHARDS = 6
SESSION_TIMEOUT_MS = "2000"


def start(sidecar_factory, names: str = "abc", **settings: str) -> list:
    nodes = [
        sidecar_factory(
            name, shards=str(SHARDS), election_session_timeout_ms=SESSION_TIMEOUT_MS, **settings
        ).start()
        for name in names
    ]
    return nodes


def schedule(target: str, schedule_id: str, value: bytes, due_ms: int) -> tuple:
    return buffer_record(target, value=value + schedule_id.encode(), deliver_at=due_ms,
                         schedule_id=schedule_id)  # fmt: skip


def cancel(schedule_id: str) -> tuple:
    return None, None, [("kpd-cancel", schedule_id.encode())]


def state(kpd: KpdClient, schedule_id: str) -> str | None:
    try:
        return str(kpd.schedule(schedule_id)["state"])
    except KpdError as error:
        assert error.code == "schedule_not_found"
        return None


def spread(nodes: list) -> bool:
    """Every sidecar leads a shard and every shard is led exactly once."""
    led = [led_shards(node) for node in nodes]
    return all(led) and sorted(s for shards in led for s in shards) == list(range(SHARDS))


def test_schedules_across_shards_exactly_once_cancel_and_first_wins(
    sidecar_factory, new_topic, kafka_bootstrap
):
    nodes = start(sidecar_factory)
    wait_for(lambda: spread(nodes), 60, "the shards spread over the three sidecars")
    buffer = nodes[0].env["KPD_BUFFER_TOPIC"]
    target = new_topic("shards")
    producer = make_producer(kafka_bootstrap)
    due = now_ms() + 3000
    n = 1500
    ids = [f"s-{i}" for i in range(n)]
    cancelled_first = set(ids[:100])  # their cancel is produced before their schedule
    cancelled_later = set(ids[100:200])
    twice = ids[200:300]  # scheduled again (another value, likely another partition)
    produce_all(
        producer, buffer, [(None, None, [("kpd-cancel", i.encode())]) for i in cancelled_first]
    )
    schedules = [
        buffer_record(target, value=f"first-{i}".encode(), deliver_at=due, schedule_id=i)
        for i in ids
    ]
    random.Random(7).shuffle(schedules)
    produce_all(producer, buffer, schedules)
    with KpdClient(nodes[1].url) as kpd:  # the first schedule is in before the second is sent
        wait_for(lambda: all(state(kpd, i) == "scheduled" for i in twice), 30, "indexed")
    produce_all(
        producer,
        buffer,
        [
            buffer_record(target, value=f"second-{i}".encode(), deliver_at=due, schedule_id=i)
            for i in twice
        ]
        + [(None, None, [("kpd-cancel", i.encode())]) for i in cancelled_later],
    )
    expected = set(ids) - cancelled_first - cancelled_later
    with TopicReader(kafka_bootstrap, target) as reader:
        reader.read_count(len(expected), 60)
        messages = reader.read_for(2.0)
    assert_exactly_once(messages, expected)
    assert_never_early(messages)
    assert {m.value() for m in messages if m.value().startswith(b"second")} == set()
    log = nodes[0].env["KPD_DELIVERY_LOG_TOPIC"]
    with TopicReader(kafka_bootstrap, log) as reader:
        events = log_events(reader.read_until(
            lambda m: sum(e["event"] == "delivered" for e in log_events(m)) >= len(expected), 60,
            "the delivery events",
        ))  # fmt: skip
    cancels = [e for e in events if e["event"] == "cancelled"]
    # A cancel that came first is booked again under its target when the schedule arrives.
    assert {e["id"] for e in cancels if e["target"] == target} == cancelled_first | cancelled_later
    delivered_by = Counter(e["node"] for e in events if e["event"] == "delivered")
    assert set(delivered_by) == {"a", "b", "c"}, delivered_by  # every sidecar delivers


def test_pops_across_shards_are_exclusive_with_exact_counts(
    sidecar_factory, new_topic, kafka_bootstrap
):
    nodes = start(sidecar_factory)
    wait_for(lambda: spread(nodes), 60, "the shards spread over the three sidecars")
    topic, group = new_topic(partitions=SHARDS), unique("g")
    values = [f"job-{i}".encode() for i in range(300)]
    produce_all(make_producer(kafka_bootstrap), topic, [(None, v, []) for v in values])
    held: dict[bytes, int] = {}
    counts: dict[bytes, list[int]] = {}
    overlaps: list[bytes] = []
    wrong: list[object] = []  # unexpected answers, reported by the test thread
    acked: Counter[bytes] = Counter()
    lock = threading.Lock()
    done = threading.Event()

    def worker(index: int) -> None:
        rng = random.Random(index)
        with KpdClient(nodes[index % 3].url) as kpd, KpdClient(nodes[(index + 1) % 3].url) as other:
            while not done.is_set():
                popped = kpd.pop(group, topic, max_messages=10, wait_ms=300, invisible_ms=30_000)
                with lock:
                    for m in popped:
                        if m.value in held:
                            overlaps.append(m.value)
                        held[m.value] = index
                        counts.setdefault(m.value, []).append(m.delivery_count)
                nacked = [m for m in popped if rng.random() < 0.3 and m.delivery_count < 3]
                kept = [m for m in popped if m not in nacked]
                with lock:
                    for m in popped:
                        held.pop(m.value, None)
                if nacked:  # through another sidecar than the pop's: receipts route by shard
                    answers = other.nack(group, [m.receipt for m in nacked], delay_ms=0)
                    wrong.extend(a for a in answers if a["status"] != "requeued")
                answers = kpd.ack(group, [m.receipt for m in kept]) if kept else []
                for answer, m in zip(answers, kept, strict=True):
                    if answer["status"] != "acked":
                        wrong.append(answer)
                    with lock:
                        acked[m.value] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: len(acked) == len(values) or wrong, 120, "every job acked")
    finally:
        done.set()
        for thread in threads:
            thread.join()
    assert not wrong
    assert not overlaps, f"held by two workers at once: {overlaps[:5]}"
    assert set(acked.values()) == {1}
    for value, seen in counts.items():  # 1, 2, 3 ... in order: every delivery counted once
        assert seen == list(range(1, len(seen) + 1)), (value, seen)
    assert any(len(seen) > 1 for seen in counts.values())  # nacks really went around


def test_a_group_or_id_named_dot_or_dot_dot_is_served_across_sidecars(
    sidecar_factory, new_topic, kafka_bootstrap
):
    """`.` and `..` match the API's name patterns. In a URL path an HTTP client takes them for
    directory steps: a forwarded pop of group `..` went to `/v1/topics/<topic>/pop`, and the SDK
    read schedule `..` at `/v1/`. Here every name is one quoted segment, in the SDK and in the
    calls a sidecar forwards to a shard's owner."""
    nodes = start(sidecar_factory, "ab")
    wait_for(lambda: spread(nodes), 60, "the shards spread over both sidecars")
    target = new_topic("dots")
    with KpdClient(nodes[0].url) as a, KpdClient(nodes[1].url) as b:
        results = a.produce(target, [
            {"value": "one", "delay_ms": 600_000, "id": "."},
            {"value": "two", "delay_ms": 600_000, "id": ".."},
        ])  # fmt: skip
        assert [r["status"] for r in results] == ["scheduled", "scheduled"]
        b.cancel(".")
        assert [a.schedule(i)["state"] for i in (".", "..")] == ["cancelled", "scheduled"]
        assert [b.schedule(i)["state"] for i in (".", "..")] == ["cancelled", "scheduled"]

        topic = new_topic(partitions=4 * SHARDS)  # each group's lanes on both sidecars
        values = produce_spread(make_producer(kafka_bootstrap), topic, 4 * SHARDS, "job")
        lanes, led_by_b = ShardMap(SHARDS, SHARDS).of_lane, led_shards(nodes[1])
        for group in (".", ".."):  # all through sidecar a: the other's lanes are forwarded
            popped = pop_all(a, group, topic, len(values))
            assert sorted(m.value for m in popped) == sorted(values)
            assert any(lanes(group, topic, m.partition) in led_by_b for m in popped)
            stats = a.group(group)["topics"][topic]
            assert (stats["in_flight"], stats["available"]) == (len(values), 0)
            acks = a.ack(group, [m.receipt for m in popped])
            assert [r["status"] for r in acks] == ["acked"] * len(values)
            assert a.group(group)["topics"][topic]["in_flight"] == 0


def one_standby_each(nodes: list) -> bool:
    """Each shard is followed by exactly one sidecar, and each sidecar follows the shards of
    exactly one other."""
    if not spread(nodes):
        return False
    led = [frozenset(led_shards(node)) for node in nodes]
    followed = [frozenset(standby_shards(node)) for node in nodes]
    return sorted(s for shards in followed for s in shards) == list(range(SHARDS)) and all(
        f in led[:i] + led[i + 1 :] for i, f in enumerate(followed)
    )


def test_each_shard_has_one_standby_the_next_to_take_it(sidecar_factory):
    """Each sidecar keeps the state of the shards of one other (its predecessor in the ring, the
    one it would take over from), not of every shard it does not lead."""
    nodes = start(sidecar_factory)
    wait_for(lambda: one_standby_each(nodes), 60, "each sidecar follows one other's shards")


def forwarded(node) -> Counter[str]:
    """Schedule calls a sidecar sent on to another, by call."""
    with node.client() as http:
        values = metric_values(http)
    prefix = "kpd_schedule_forwarded_total{call="
    return Counter({k[len(prefix) : -1]: int(v) for k, v in values.items() if k.startswith(prefix)})


def indexed_here(node, schedule_id: str) -> bool:
    """Does the sidecar's own index follow the shard of `schedule_id`, an id not written yet? A
    call forwarded to it is answered from that index alone: 404 there, 503 where it does not
    follow the shard (or has not caught up)."""
    with node.client() as http:
        answer = http.get(f"/v1/schedules/{schedule_id}", headers={FORWARDED: "test"})
    assert answer.status_code in (404, 503), answer.text
    return answer.status_code == 404


@pytest.mark.parametrize("standby_schedules", ["next", "all"])
def test_schedule_calls_for_shards_a_sidecar_does_not_follow_go_to_their_owner(
    sidecar_factory, new_topic, standby_schedules
):
    """With `standby_schedules=next` a sidecar's index follows only the shards it leads or would
    take over next: a schedule of another shard is written, read (read-your-writes) and cancelled
    through its owner. With `all` (the default) it keeps every shard and answers them itself."""
    nodes = start(sidecar_factory, standby_schedules=standby_schedules)
    wait_for(lambda: one_standby_each(nodes), 60, "each sidecar follows one other's shards")
    node = nodes[0]
    followed = standby_shards(node)
    indexed = led_shards(node) | followed
    shard_of = ShardMap(SHARDS, SHARDS).of_key
    ids = [unique("fw") for _ in range(200)]
    far = next(i for i in ids if shard_of(i) not in indexed)  # neither led nor followed here
    near = next(i for i in ids if shard_of(i) in followed)
    far_later, missing = [i for i in ids if shard_of(i) not in indexed and i != far][-2:]
    target = new_topic("fw")
    due = now_ms() + 120_000
    wait_for(lambda: indexed_here(node, near), 30, "the standby caught up on its shards")
    before = forwarded(node)
    with KpdClient(node.url) as kpd:
        sent_at = now_ms()
        results = kpd.produce(target, [
            {"value": "far", "deliver_at_ms": due, "id": far},
            {"value": "now", "key": "k"},
            {"value": "near", "delay_ms": 120_000, "id": near},
            {"value_b64": "AAE=", "delay_ms": 60_000, "id": far_later},
        ])  # fmt: skip
        answered_at = now_ms()
        assert [r["status"] for r in results] == ["scheduled", "enqueued", "scheduled", "scheduled"]
        assert results[0]["deliver_at_ms"] == due
        # A delay is turned into a due time once, where the call came in.
        assert sent_at + 60_000 <= results[3]["deliver_at_ms"] <= answered_at + 60_000
        assert kpd.schedule(far_later)["deliver_at_ms"] == results[3]["deliver_at_ms"]
        # Right after the answer: the index that answers shows the schedule.
        assert kpd.schedule(far) == {"id": far, "state": "scheduled", "target": target,
                                     "deliver_at_ms": due}  # fmt: skip
        assert kpd.schedule(near)["state"] == "scheduled"
        with pytest.raises(KpdError) as unknown:
            kpd.schedule(missing)
        assert (unknown.value.status, unknown.value.code) == (404, "schedule_not_found")
        kpd.cancel(far)
        assert kpd.schedule(far)["state"] == "cancelled"
    # What the forwarding below is judged by: a move of shards meanwhile (a rebalance on a slow
    # machine) would make the same calls answer here; it is named, not taken for a fault.
    now_indexed = led_shards(node) | standby_shards(node)
    assert now_indexed == indexed, f"this sidecar's shards moved: {indexed} -> {now_indexed}"
    # The id never written is asked of its shard's owner in both: only the owner can say there
    # is none (a follower's index may not have a schedule written a moment ago).
    sent_on = (
        Counter(schedule=1, get=4, cancel=1) if standby_schedules == "next" else Counter(get=1)
    )
    assert forwarded(node) - before == sent_on
    with KpdClient(nodes[1].url) as other:  # every sidecar sees the same state
        assert other.schedule(far)["state"] == "cancelled"
        assert other.schedule(near)["state"] == "scheduled"
    node.stop()  # its RocksDB holds the schedules of the shards it followed
    stores = held_stores(node.data_dir / "shards", [*COLUMN_FAMILIES, OFFSETS_CF], SHARDS)
    try:
        index = ScheduleIndex(stores, ShardMap(SHARDS, SHARDS))
        kept_far = standby_schedules == "all"
        assert (index.find(far) is not None, index.find(near) is not None) == (kept_far, True)
    finally:
        stores.close()


def test_schedules_for_a_killed_owners_shards_are_taken_while_the_group_names_it(
    sidecar_factory, new_topic, kafka_bootstrap
):
    """With `next`, a sidecar sends a schedule on to its shard's owner. Right after the owner
    dies the group still names it for a while: the schedules are written to the buffer topic
    instead, answered at once, and delivered once by the shard's next leader."""
    nodes = start(sidecar_factory, standby_schedules="next")
    wait_for(lambda: one_standby_each(nodes), 60, "each sidecar follows one other's shards")
    node = nodes[0]
    indexed = led_shards(node) | standby_shards(node)
    (owner,) = [other for other in nodes[1:] if not led_shards(other) & indexed]
    shard_of = ShardMap(SHARDS, SHARDS).of_key
    ids = [i for i in (unique("away") for _ in range(2000)) if shard_of(i) not in indexed]
    target = new_topic("away")
    owner.terminate(signal.SIGKILL)
    answers: list[tuple[str, str, float]] = []
    with KpdClient(node.url) as kpd:
        ends = time.monotonic() + 4.0  # the session timeout (2 s) and a refresh of the owners
        for schedule_id in ids:
            if time.monotonic() > ends:
                break
            started = time.monotonic()
            sent = {"value": schedule_id, "delay_ms": 500, "id": schedule_id}
            (result,) = kpd.produce(target, [sent])
            answers.append((schedule_id, result["status"], time.monotonic() - started))
    assert {status for _, status, _ in answers} == {"scheduled"}, answers[:3]
    with TopicReader(kafka_bootstrap, target) as reader:
        reader.read_count(len(answers), 60)
        messages = reader.read_for(1.0)
    assert_exactly_once(messages, {schedule_id for schedule_id, _, _ in answers})
    assert_never_early(messages)
    print(f"\n{len(answers)} schedules, slowest answer {max(t for *_, t in answers):.2f} s")


def test_a_sidecar_joining_under_load_takes_shards_and_loses_nothing(
    sidecar_factory, new_topic, kafka_bootstrap
):
    a, b = start(sidecar_factory, "ab")
    wait_for(lambda: spread([a, b]), 60, "a and b share the shards")
    target, popped = new_topic("join"), new_topic("work", partitions=SHARDS)
    values = [f"job-{i}".encode() for i in range(600)]
    produce_all(make_producer(kafka_bootstrap), popped, [(None, v, []) for v in values])
    with (
        DelayLoad(kafka_bootstrap, a.env["KPD_BUFFER_TOPIC"], target) as delay,
        PopLoad([a.url, b.url], unique("g"), popped, values, SHARDS) as pop,
    ):
        wait_for(lambda: len(delay.acknowledged) > 100 and pop.acked, 60, "load flowing")
        (c,) = start(sidecar_factory, "c")
        wait_for(lambda: spread([a, b, c]), 60, "c takes shards from a and b")
        wait_for(lambda: len(delay.acknowledged) > 400, 60, "load after the join")
        pop.wait_settled()
    delay.assert_delivered(quiet_s=2.0)
    pop.assert_each_acked_once()


@pytest.mark.parametrize("standby_schedules", ["all", "next"])
def test_killed_and_paused_shard_owners_lose_nothing(
    sidecar_factory, new_topic, kafka_bootstrap, standby_schedules
):
    """With `next`, a shard can move to a sidecar whose index did not follow it: it catches up
    before it delivers, and still nothing is lost, early or twice."""
    nodes = start(sidecar_factory, standby_schedules=standby_schedules)
    wait_for(lambda: spread(nodes), 60, "the shards spread over the three sidecars")
    a, b, c = nodes
    target, popped = new_topic("chaos"), new_topic("work", partitions=SHARDS)
    values = [f"job-{i}".encode() for i in range(600)]
    produce_all(make_producer(kafka_bootstrap), popped, [(None, v, []) for v in values])
    with (
        DelayLoad(kafka_bootstrap, a.env["KPD_BUFFER_TOPIC"], target) as delay,
        PopLoad(a.url, unique("g"), popped, values, SHARDS) as pop,
    ):
        wait_for(lambda: len(delay.acknowledged) > 100 and pop.acked, 60, "load flowing")
        b.terminate(signal.SIGKILL)
        wait_for(lambda: spread([a, c]), 60, "a and c take b's shards")
        c.signal(signal.SIGSTOP)  # a zombie: it holds producers of shards it will lose
        wait_for(lambda: led_shards(a) == set(range(SHARDS)), 60, "a takes c's shards")
        time.sleep(1)  # a works alone for a moment before the zombie wakes
        c.signal(signal.SIGCONT)
        wait_for(lambda: len(delay.acknowledged) > 600, 60, "load after the chaos")
        pop.wait_settled()
    delay.assert_delivered(quiet_s=3.0)
    pop.assert_each_acked_once()


def test_a_killed_sidecar_s_shards_deliver_again_before_its_session_ends(
    sidecar_factory, new_topic, kafka_bootstrap
):
    # The broker's stock 6 s session: the group alone would leave b's shards idle that long.
    a, b = (sidecar_factory(n, shards=str(SHARDS)).start() for n in "ab")
    wait_for(lambda: spread([a, b]), 60, "a and b share the shards")
    target = new_topic("failover")
    with DelayLoad(kafka_bootstrap, a.env["KPD_BUFFER_TOPIC"], target) as delay:
        wait_for(lambda: len(delay.acknowledged) > 100, 60, "load flowing")
        b.terminate(signal.SIGKILL)
        killed_ms = now_ms()
        wait_for(lambda: led_shards(a) == set(range(SHARDS)), 30, "a leads every shard")
        taken_ms = now_ms() - killed_ms
        wait_for(lambda: len(delay.acknowledged) > 400, 60, "load after the kill")
    messages = delay.assert_delivered()
    late = sorted(m.timestamp()[1] - int(dict(m.headers())["kpd-deliver-at"]) for m in messages)
    print(f"\nb's shards led by a {taken_ms} ms after the kill; worst lateness {late[-1]} ms")
    assert taken_ms < 5_000  # before the 6 s session timeout: the successor took over early
    assert late[-1] < 5_000
