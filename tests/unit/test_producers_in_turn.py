"""Which producer a role's next transaction takes (the Kafka side is
`tests/integration/test_transactions.py`)."""

from __future__ import annotations

from typing import Any, cast

from confluent_kafka import Producer

from foundation.producers_in_turn import ProducersInTurn
from foundation.supervision import LoopHealth


class FakeProducer:
    def __init__(self, txn_id: str, config: dict[str, Any]) -> None:
        self.txn_id, self.config = txn_id, config
        self.inits = 0

    def init_transactions(self, _: float) -> None:
        self.inits += 1


def test_transactions_take_the_ids_in_turn_and_a_renewal_makes_new_epochs_of_all() -> None:
    config = {"batch.size": 1000}
    made: list[FakeProducer] = []

    def make(txn_id: str) -> Producer:
        made.append(FakeProducer(txn_id, dict(config)))
        return cast(Producer, made[-1])

    producers = ProducersInTurn(make, "kpd.pop-leader-3")
    assert producers.ids == ["kpd.pop-leader-3", "kpd.pop-leader-3.1"]
    producers.init_transactions(1)
    assert [p.inits for p in made] == [1, 1]  # a new owner fences every id before writing
    taken = [cast(FakeProducer, producers.take()).txn_id for _ in range(4)]
    assert taken == ["kpd.pop-leader-3", "kpd.pop-leader-3.1"] * 2
    config["batch.size"] = 500  # a refused batch asked for smaller ones
    producers.renew(1)
    assert len(made) == 4 and [p.inits for p in made[2:]] == [1, 1]
    assert {p.config["batch.size"] for p in made[2:]} == {500}
    assert cast(FakeProducer, producers.take()) is made[2]  # the turn goes on
    assert cast(FakeProducer, producers.take()) is made[3]


def test_one_producer_is_taken_every_time() -> None:
    producer = cast(Producer, FakeProducer("t", {}))
    producers = ProducersInTurn.of(producer)
    assert [producers.take() for _ in range(3)] == [producer] * 3


def test_a_role_released_while_it_fences_fences_every_id_and_starts() -> None:
    """The release came while the first id's `init_transactions` waited out the old owner's
    open transaction: the old owner was fenced already, and a start that ended at the second id
    left the shard with no writer until the group gave it back (2.5 s late in a CI run)."""
    health = LoopHealth("delay", 0)
    made: list[FakeProducer] = []

    class ReleasedMeanwhile(FakeProducer):
        def init_transactions(self, timeout_s: float) -> None:
            super().init_transactions(timeout_s)
            assert health.in_fence  # the group's revoke waits the whole fence out
            health.released = True

    def make(txn_id: str) -> Producer:
        made.append(ReleasedMeanwhile(txn_id, {}))
        return cast(Producer, made[-1])

    producers = ProducersInTurn(make, "kpd.delay-leader-0", fencing=health.fencing)
    producers.init_transactions(1)
    assert [p.inits for p in made] == [1, 1]
    assert not health.in_fence
