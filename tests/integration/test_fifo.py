"""FIFO per key (`ordering = "key"`, docs/fifo.md) over real HTTP against real Kafka: the
messages of one key are leased one at a time in offset order, a nacked or expired one comes
again in place and keeps its key blocked, other keys and keyless messages flow meanwhile."""

from __future__ import annotations

import random
import signal
import threading

from kafka_helpers import make_producer, pop_until, produce_all, unique, wait_for

from kpd_client import KpdClient

ORDERED = {"shards": "1", "workers": "1", "group_defaults__ordering": "key"}
# An ack's answers that mean the message is acked: `already_acked` when its first answer was lost
# to a kill and the client sent it again, or when a newer delivery of it was acked first.
ACKED = ("acked", "acked_late", "already_acked")
TOOK = ("acked", "acked_late")  # this very receipt settled it: at most one per message


def produce(bootstrap: str, topic: str, records: list[tuple[str | None, str]]) -> None:
    keyed = [(None if k is None else k.encode(), v.encode(), []) for k, v in records]
    produce_all(make_producer(bootstrap), topic, keyed, partition=0)


def values(messages) -> list[bytes]:
    return sorted(m.value for m in messages)


def test_one_lease_per_key_in_order_and_a_nack_keeps_its_key_blocked(
    sidecar_factory, new_topic, kafka_bootstrap
) -> None:
    sidecar = sidecar_factory("a", **ORDERED).start()
    topic, group = new_topic(), unique("g")
    produce(
        kafka_bootstrap, topic,
        [("a", "a1"), ("a", "a2"), ("b", "b1"), (None, "n1"), ("b", "b2"), ("a", "a3")],
    )  # fmt: skip
    with KpdClient(sidecar.url) as kpd:
        first = pop_until(kpd, group, topic, 3, invisible_ms=30_000)
        assert values(first) == [b"a1", b"b1", b"n1"]
        assert kpd.pop(group, topic, 10, 30_000) == []  # a2, b2 and a3 wait for their keys
        by_value = {m.value: m for m in first}
        assert kpd.ack(group, [by_value[b"a1"].receipt])[0]["status"] == "acked"
        (a2,) = kpd.pop(group, topic, 10, 30_000, wait_ms=2_000)
        assert a2.value == b"a2"
        # b1 is nacked: it comes again in its place after its backoff, b2 still waits.
        assert kpd.nack(group, [by_value[b"b1"].receipt], delay_ms=1_000)[0]["status"] == (
            "requeued"
        )
        assert kpd.pop(group, topic, 10, 30_000) == []
        (b1,) = kpd.pop(group, topic, 10, 30_000, wait_ms=5_000)
        assert (b1.value, b1.delivery_count) == (b"b1", 2)
        assert kpd.ack(group, [b1.receipt, a2.receipt, by_value[b"n1"].receipt]) == [
            {"receipt": r, "status": "acked"} for r in (b1.receipt, a2.receipt,
                                                        by_value[b"n1"].receipt)
        ]  # fmt: skip
        rest = pop_until(kpd, group, topic, 2, invisible_ms=30_000)
        assert values(rest) == [b"a3", b"b2"]


def test_an_expired_lease_comes_again_at_once_and_the_group_commits_past_what_is_done(
    sidecar_factory, new_topic, kafka_bootstrap, admin
) -> None:
    sidecar = sidecar_factory("a", **ORDERED).start()
    topic, group = new_topic(), unique("g")
    produce(kafka_bootstrap, topic, [("a", "a1"), ("a", "a2"), ("b", "b1")])
    with KpdClient(sidecar.url) as kpd:
        first = pop_until(kpd, group, topic, 2, invisible_ms=1_000)
        assert values(first) == [b"a1", b"b1"]
        b1 = next(m for m in first if m.value == b"b1")
        assert kpd.ack(group, [b1.receipt])[0]["status"] == "acked"
        again = kpd.pop(group, topic, 10, 30_000, wait_ms=5_000)  # a1's lease ends: a1 again
        assert [(m.value, m.delivery_count) for m in again] == [(b"a1", 2)]
        assert kpd.ack(group, [again[0].receipt])[0]["status"] == "acked"
        (a2,) = kpd.pop(group, topic, 10, 30_000, wait_ms=2_000)
        assert a2.value == b"a2"
        assert kpd.ack(group, [a2.receipt])[0]["status"] == "acked"
        wait_for(
            lambda: kpd.group(group)["topics"][topic]["partitions"]["0"]["committed"] == 3,
            30, "the group's offset past every message",
        )  # fmt: skip


def test_eight_workers_with_nacks_expiries_and_a_killed_sidecar_keep_each_key_in_order(
    sidecar_factory, new_topic, kafka_bootstrap
) -> None:
    """Interleaved keys over 4 partitions, 8 workers acking, nacking and abandoning messages at
    random, and one sidecar SIGKILLed: per key the messages are delivered in the produced order,
    each is acked by one receipt and never delivered again after, and no worker ever got a
    message of a key while another held another one of it."""
    settings = {"shards": "2", "workers": "1", "group_defaults__ordering": "key"}
    a = sidecar_factory("a", **settings).start()
    b = sidecar_factory("b", **settings).start()
    topic, group = new_topic(partitions=4), unique("g")
    keys = [f"k{i}" for i in range(24)]
    produced = {key: [f"{key}:{n}" for n in range(12)] for key in keys}
    records = [(key.encode(), value.encode(), []) for n in range(12) for key in keys
               for value in [produced[key][n]]]  # fmt: skip
    produce_all(make_producer(kafka_bootstrap), topic, records)
    # value -> (delivery count, status) of each ack answered in ACKED
    answers: dict[str, list[tuple[int, str]]] = {}
    # Each key's deliveries in the order the pops were answered: a key's next message is handed
    # out only after its previous one is done, so this order is the server's. (The acks' own
    # order is not: an answer lost to the kill comes back, `already_acked`, seconds later.)
    delivered: dict[str, list[str]] = {key: [] for key in keys}
    held: dict[str, str] = {}  # key -> the value a worker holds
    lock, violations, stop = threading.Lock(), [], threading.Event()
    total = sum(map(len, produced.values()))

    def work(seed: int) -> None:
        rng = random.Random(seed)
        with KpdClient([a.url, b.url], retry_deadline_s=60) as kpd:
            while not stop.is_set():
                popped = kpd.pop(group, topic, 3, 3_000, wait_ms=500)
                with lock:  # a whole batch is held at once, then handled one by one
                    for message in popped:
                        key, value = message.key, message.value.decode()
                        if held.get(key, value) != value:  # its own again: the lease had ended
                            violations.append((key, held[key], value))
                        if value in answers:
                            violations.append(("delivered after its ack", value, answers[value]))
                        held[key] = value
                        delivered[key].append(value)
                for message in popped:
                    key, value = message.key, message.value.decode()
                    roll = rng.random()
                    with lock:
                        del held[key]  # before the call: its effect may come before its answer
                    if roll < 0.1:
                        kpd.nack(group, [message.receipt], delay_ms=rng.choice([0, 200]))
                    elif roll < 0.15:
                        continue  # abandoned: its lease ends
                    elif (status := kpd.ack(group, [message.receipt])[0]["status"]) in ACKED:
                        with lock:
                            answers.setdefault(value, []).append((message.delivery_count, status))
                with lock:
                    if len(answers) >= total:
                        stop.set()

    workers = [threading.Thread(target=work, args=(seed,), daemon=True) for seed in range(8)]
    for worker in workers:
        worker.start()
    wait_for(lambda: len(answers) >= total // 3, 120, "a third acked")
    a.terminate(signal.SIGKILL)
    for worker in workers:
        worker.join(timeout=180)
    stop.set()
    assert not any(worker.is_alive() for worker in workers)
    assert violations == []
    # Per key: first deliveries in the produced order (a message delivered again follows
    # itself); each message acked, by one receipt (a stale one may read `already_acked`).
    in_order = {key: [v for i, v in enumerate(seq) if i == 0 or seq[i - 1] != v]
                for key, seq in delivered.items()}  # fmt: skip
    assert in_order == produced, {k: delivered[k] for k in keys if in_order[k] != produced[k]}
    assert sorted(answers) == sorted(v for values in produced.values() for v in values)
    took_twice = {v: seen for v, seen in answers.items() if sum(s in TOOK for _, s in seen) > 1}
    assert took_twice == {}


def test_a_seek_ends_the_leases_that_block_keys(sidecar_factory, new_topic, kafka_bootstrap):
    sidecar = sidecar_factory("a", **ORDERED).start()
    topic, group = new_topic(), unique("g")
    produce(kafka_bootstrap, topic, [("a", "a1"), ("a", "a2")])
    with KpdClient(sidecar.url) as kpd:
        first = pop_until(kpd, group, topic, 1, invisible_ms=30_000)
        assert values(first) == [b"a1"]
        assert kpd.seek(group, topic, to="latest") == [{"partition": 0, "offset": 2}]
        assert kpd.ack(group, [first[0].receipt])[0]["status"] == "superseded"
        produce(kafka_bootstrap, topic, [("a", "a3")])  # a is not blocked by a1 any more
        (a3,) = kpd.pop(group, topic, 10, 30_000, wait_ms=5_000)
        assert a3.value == b"a3"
        assert kpd.seek(group, topic, to="earliest") == [{"partition": 0, "offset": 0}]
        again = pop_until(kpd, group, topic, 1, invisible_ms=30_000)
        assert [(m.value, m.delivery_count) for m in again] == [(b"a1", 1)]  # a first delivery
        assert kpd.pop(group, topic, 10, 30_000) == []  # a2 and a3 wait for it
