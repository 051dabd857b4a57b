"""A call that spans shards keeps what some shards did when one shard's pop service fails
meanwhile (a real sidecar, one shard's pop role fenced by a zombie's `init_transactions`): a pop
answers what it leased, an ack settles the other shards' receipts."""

from __future__ import annotations

import asyncio

import httpx
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka_helpers import make_producer, metric_values, unique, wait_for

from cluster.routing.pop_turns import visit_order
from foundation.kafka_clients import transactional_producer
from foundation.shards import ShardMap
from kpd_client import AsyncKpdClient, KpdClient
from kpd_client.client import PoppedMessage
from kpd_client.retry import RETRYABLE

ROUNDS = 4


def fence_pop_role(sidecar, kafka_bootstrap: str, shard: int) -> None:
    """A zombie's `init_transactions` on both of the shard's pop transactional ids: the role's
    next commit fails, and it restarts from Kafka."""
    prefix, config = sidecar.env["KPD_STATE_TOPIC_PREFIX"], {"bootstrap.servers": kafka_bootstrap}
    for txn_id in (f"{prefix}pop-leader-{shard}", f"{prefix}pop-leader-{shard}.1"):
        transactional_producer(config, txn_id).init_transactions(30)


def floor_at_end(sidecar, admin: AdminClient, kafka_bootstrap: str, shard: int) -> bool:
    """Has the shard's pop role committed a replay floor past all it wrote (nothing live), so
    that, with nothing to pop, it has nothing of its own left to commit? A floor that moved went
    in a transaction of its own up to a second after the acks' offsets, and a role fenced before
    it failed on that commit, before the pop came (3 of 4 rounds of a local run)."""
    prefix, config = sidecar.env["KPD_STATE_TOPIC_PREFIX"], {"bootstrap.servers": kafka_bootstrap}
    state = TopicPartition(f"{prefix}pop-state", shard)
    request = ConsumerGroupTopicPartitions(f"{prefix}pop-floor", [state])
    found = admin.list_consumer_group_offsets([request])[request.group_id]
    floor = found.result(timeout=10).topic_partitions[0].offset
    reader = Consumer({**config, "group.id": unique("ends")})
    try:
        _, end = reader.get_watermark_offsets(state, timeout=10)
    finally:
        reader.close()
    return floor == max(end - 1, 0)  # the last record's offset + 1: the end is past its marker


def starts_of_shard_1(sidecar) -> int:
    lines = sidecar.log_path.read_text().splitlines()
    return sum("pop service started" in line and "shard=1" in line for line in lines)


def per_partition(kpd: KpdClient, group: str, topic: str, field: str) -> list[int]:
    """One field of the group's stats per partition: `lag`, or `committed` (negative: none
    committed yet, which a lag of 0 does not tell apart from one at an empty partition's end)."""
    partitions = kpd.group(group)["topics"][topic]["partitions"]
    return [partitions[p][field] for p in sorted(partitions)]


class Popper:
    """Pops over HTTP one call at a time (no retries), acking what it leased, and counting the
    calls: the worker's pop router asks its shards in an order that turns with each call of the
    (group, topic) (`visit_order`)."""

    def __init__(self, http: httpx.Client, kpd: KpdClient, group: str, topic: str) -> None:
        self.http, self.kpd, self.group = http, kpd, group
        self.url = f"/v1/groups/{group}/topics/{topic}/pop"
        self.calls = 0
        self.received: list[bytes] = []

    def pop(self) -> int:
        """One call; what it leased is acked; its status."""
        body = {"max_messages": 10, "invisible_ms": 600_000, "wait_ms": 0}
        self.calls += 1  # before the call: one that raises here was still made
        answer = self.http.post(self.url, json=body)
        if answer.status_code == 200:
            messages = [PoppedMessage.from_json(m) for m in answer.json()["messages"]]
            self.received += [m.value for m in messages]
            acks = self.kpd.ack(self.group, [m.receipt for m in messages]) if messages else []
            assert [a["status"] for a in acks] == ["acked"] * len(messages)
            return 200 if messages else 204
        return answer.status_code

    def first_asked(self) -> int:
        """The shard the next call asks first, if the router has seen every call counted."""
        return int(visit_order([0, 1], [], self.calls)[0])


def test_a_pop_keeps_what_one_shard_leased_when_another_shard_fails(
    sidecar_factory, new_topic, kafka_bootstrap, admin
):
    """Each round: both shards know the topic; one message goes to each shard's lane; shard 1's
    pop role is fenced; one pop asks both shards, and shard 1's commit fails. The rounds take
    turns at which shard the pop asks first (idle calls before the round move the router's
    turn). The pop answers with shard 0's message, whichever shard it asked first:
    failing the whole call after shard 0 had leased left that message invisible for its lease
    (here 10 minutes), and its ack, after a shorter lease, read "superseded" in a CI run; failing
    it when shard 1 came first answered 503 while shard 0 had a message (CI, stop 43)."""
    sidecar = sidecar_factory("p", shards="2").start()
    topic, group = new_topic("work", partitions=2), unique("g")  # one lane per shard
    producer = make_producer(kafka_bootstrap)
    sent: set[bytes] = set()
    answers: list[int] = []
    with sidecar.client() as http, KpdClient(sidecar.url) as kpd:
        popper = Popper(http, kpd, group, topic)
        lags = lambda: per_partition(kpd, group, topic, "lag")  # noqa: E731
        for n in range(ROUNDS):
            # Until a call leases nothing, every shard asked (each knows the topic), and the acks'
            # offsets and the replay floor are committed: an idle pop role then commits nothing
            # on its own, and the fenced one fails at the pop's lease, not before it.
            idle = lambda: popper.pop() == 204 and lags() == [0, 0]  # noqa: E731
            wait_for(idle, 30, "everything acked and committed")
            floor = lambda: floor_at_end(sidecar, admin, kafka_bootstrap, 1)  # noqa: E731
            wait_for(floor, 30, "shard 1's replay floor past all it wrote")
            while popper.first_asked() != n % 2:  # even rounds shard 0 first, odd ones shard 1
                assert popper.pop() == 204
            for partition in (0, 1):
                producer.produce(topic, value=f"r{n}p{partition}".encode(), partition=partition)
                sent.add(f"r{n}p{partition}".encode())
            producer.flush(10)
            ready = lambda: kpd.group(group)["topics"][topic]["available"] == 2  # noqa: E731
            wait_for(ready, 30, "this round's message ready on each shard")
            # A new group's first offsets go out a second after its lanes first fetched a record,
            # in a transaction of their own: round 1's fence failed that one, before the pop came
            # (a fresh clone's run, stop 48).
            at_ends = lambda n=n: per_partition(kpd, group, topic, "committed") == [n, n]  # noqa: E731
            wait_for(at_ends, 30, "the group's offsets committed at the partitions' ends")
            started = starts_of_shard_1(sidecar)
            fence_pop_role(sidecar, kafka_bootstrap, 1)
            answers.append(popper.pop())
            back = lambda before=started: starts_of_shard_1(sidecar) > before  # noqa: E731
            wait_for(back, 30, "shard 1's pop role back")
        wait_for(lambda: popper.pop() == 204 and len(popper.received) >= len(sent), 60, "all")
        partial = metric_values(http)["kpd_pop_partial_total"]
    print(f"\nfenced rounds' answers: {answers}; partial answers: {partial:.0f}")
    assert answers == [200] * ROUNDS  # never the 503 that left shard 0's message leased
    assert partial == ROUNDS  # every round's pop met shard 1's failure, in either order
    assert sorted(popper.received) == sorted(sent)  # none left invisible in a lease


def test_an_ack_across_shards_settles_the_receipts_of_the_shards_that_answer(
    sidecar_factory, new_topic, kafka_bootstrap
):
    """Two receipts, one per shard, acked in one call just after shard 1's pop role was fenced:
    shard 0's is `acked` and shard 1's `unavailable` (its role fails or restarts), with a code
    the client retries on; the client sends that one again, alone, and it is `acked` once the
    role is back. Failing the whole call made the retry read `already_acked` for shard 0's."""
    sidecar = sidecar_factory("a", shards="2").start()
    topic, group = new_topic("work", partitions=2), unique("g")
    shard_of = ShardMap(2, 2).of_lane
    assert sorted(shard_of(group, topic, p) for p in (0, 1)) == [0, 1]  # one lane per shard
    producer = make_producer(kafka_bootstrap)
    with sidecar.client() as http, KpdClient(sidecar.url) as kpd:
        acks = (_ack_by_http(http, group), kpd.ack, _ack_by_async_client(sidecar.url))
        for rounds, ack in enumerate(acks):
            for partition in (0, 1):
                producer.produce(topic, value=f"{rounds}".encode(), partition=partition)
            producer.flush(10)
            popped = pop_until(kpd, group, topic, 2)
            by_shard = {shard_of(group, topic, m.partition): m.receipt for m in popped}
            fence_pop_role(sidecar, kafka_bootstrap, 1)
            results = ack(group, [by_shard[0], by_shard[1]])
            print(f"\nround {rounds}: {results}")
            assert results[0]["status"] == "acked"
            if rounds == 0:  # one call, as it came: shard 1's receipt is left for a retry
                assert results[1]["status"] == "unavailable"
                assert results[1]["code"] in RETRYABLE and results[1]["retry_after_ms"] == 1000
                acked = lambda r=by_shard[1]: kpd.ack(group, [r])[0]["status"] == "acked"  # noqa: E731
                wait_for(acked, 30, "shard 1's receipt acked once its role is back")
            else:  # a client (sync, async): shard 1's receipt sent again by itself, until acked
                assert results[1]["status"] == "acked"
            acks_committed = lambda: per_partition(kpd, group, topic, "lag") == [0, 0]  # noqa: E731
            wait_for(acks_committed, 30, "both acks committed")


def pop_until(kpd: KpdClient, group: str, topic: str, count: int) -> list[PoppedMessage]:
    popped: list[PoppedMessage] = []
    wait_for(
        lambda: popped.extend(kpd.pop(group, topic, 10, 600_000)) or len(popped) == count,
        30,
        f"{count} messages popped",
    )
    return popped


def _ack_by_http(http: httpx.Client, group: str):
    def ack(group: str, receipts: list[str]) -> list[dict]:
        answer = http.post(f"/v1/groups/{group}/ack", json={"receipts": receipts})
        assert answer.status_code == 200, answer.text
        return answer.json()["results"]

    return ack


def _ack_by_async_client(url: str):
    def ack(group: str, receipts: list[str]) -> list[dict]:
        async def call() -> list[dict]:
            async with AsyncKpdClient(url) as kpd:
                return await kpd.settle(group, "ack", receipts)

        return asyncio.run(call())

    return ack
