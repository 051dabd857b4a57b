"""Receipts through a real sidecar: the receipts of a pop batch share their signatures, a batch
with gaps (a transactional producer's markers) settles exactly, and version-1 receipts issued
before an upgrade still settle the leases they name."""

from __future__ import annotations

from itertools import pairwise

from confluent_kafka import Producer
from kafka_helpers import unique, wait_for

from kpd_client import KpdClient, PoppedMessage
from revive.receipt import ReceiptCodec

SECRET = "integration-receipt-secret-0123"
CODEC = ReceiptCodec(SECRET.encode())
TRANSACTIONS = [3, 1, 2, 1, 4, 1, 1, 1, 1, 2]  # records per transaction: 17 records, 10 markers


def _sidecar(sidecar_factory):
    return sidecar_factory(
        "a",
        receipt_secret=SECRET,
        group_defaults__backoff_ms="[300]",
        group_defaults__max_deliveries="3",
    ).start()


def _pop(kpd: KpdClient, group: str, topic: str, count: int) -> list[PoppedMessage]:
    popped: list[PoppedMessage] = []

    def all_popped() -> bool:
        popped.extend(kpd.pop(group, topic, count - len(popped), 30_000, wait_ms=1000))
        return len(popped) == count

    wait_for(all_popped, 30, f"{count} messages popped")
    return popped


def _produce_in_transactions(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("txn")})
    producer.init_transactions(30)
    for t, size in enumerate(TRANSACTIONS):
        producer.begin_transaction()
        for i in range(size):
            producer.produce(topic, f"{t}-{i}".encode())
        producer.commit_transaction(30)


def test_a_gapped_batch_settles_exactly_with_fewer_signatures_than_messages(
    sidecar_factory, new_topic, kafka_bootstrap
):
    sidecar, topic, group = _sidecar(sidecar_factory), new_topic(), unique("g")
    _produce_in_transactions(kafka_bootstrap, topic)
    with KpdClient(sidecar.url) as kpd:
        popped = _pop(kpd, group, topic, sum(TRANSACTIONS))
        offsets = [m.offset for m in popped]
        assert offsets[-1] - offsets[0] + 1 > len(offsets)  # the markers left gaps
        decoded = [CODEC.decode(m.receipt, group=group) for m in popped]
        assert [(r.topic, r.offset, r.delivery_count) for r in decoded] == [
            (topic, m.offset, 1) for m in popped
        ]
        # One signature per 8 runs of consecutive offsets of a checkpoint (one pop's share).
        checkpoints: dict[int, list[PoppedMessage]] = {}
        for message, receipt in zip(popped, decoded, strict=True):
            checkpoints.setdefault(receipt.checkpoint_id, []).append(message)
        assert len(checkpoints) < len(popped)  # pops of several messages, as is usual
        for batch in checkpoints.values():
            runs = 1 + sum(b.offset != a.offset + 1 for a, b in pairwise(batch))
            assert len({m.receipt[4:] for m in batch}) == -(-runs // 8)
        outside = popped[0].receipt[:2] + "__" + popped[0].receipt[4:]  # position 4095
        assert kpd.ack(group, [outside])[0]["status"] == "invalid"
        statuses = [r["status"] for r in kpd.ack(group, [m.receipt for m in popped])]
        assert statuses == ["acked"] * len(popped)
        assert kpd.ack(group, [popped[5].receipt])[0]["status"] == "already_acked"


def test_version_1_receipts_of_live_leases_still_settle(
    sidecar_factory, new_topic, kafka_bootstrap
):
    sidecar, topic, group = _sidecar(sidecar_factory), new_topic(), unique("g")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for value in ("acked", "nacked", "rejected"):
        producer.produce(topic, value.encode())
    assert producer.flush(30) == 0
    with KpdClient(sidecar.url) as kpd:
        popped = {m.value: m for m in _pop(kpd, group, topic, 3)}
        # What a node before version 2 issued for the same deliveries.
        v1 = {
            value: CODEC.encode(CODEC.decode(m.receipt, group=group)) for value, m in popped.items()
        }
        assert all(text[:2] == "AZ" for text in v1.values())  # version byte 1
        assert kpd.ack(group, [v1[b"acked"]])[0]["status"] == "acked"
        assert kpd.ack(group, [popped[b"acked"].receipt])[0]["status"] == "already_acked"
        assert kpd.ack("other-group", [v1[b"nacked"]])[0]["status"] == "invalid"
        assert kpd.nack(group, [v1[b"nacked"]])[0]["status"] == "requeued"
        assert kpd.extend(group, [v1[b"rejected"]], 60_000)[0]["status"] == "ok"
        assert kpd.reject(group, [v1[b"rejected"]])[0]["status"] == "dead_lettered"

        [again] = _pop(kpd, group, topic, 1)  # from the retry topic, after the 300 ms backoff
        assert (again.value, again.delivery_count) == (b"nacked", 2)
        retried = CODEC.decode(again.receipt, group=group)
        assert retried.delivery_count == 2 and retried.topic != topic
        assert kpd.ack(group, [v1[b"nacked"]])[0]["status"] == "superseded"
        assert kpd.ack(group, [again.receipt])[0]["status"] == "acked"
