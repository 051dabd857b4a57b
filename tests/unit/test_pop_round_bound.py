"""How long a pop waits for this worker's shards (`cluster.routing.pop_router`): one bound for the
round, not one per shard, so a worker whose shards all hang (their threads blocked on a Kafka call)
answers 503 once, instead of after the bound times its shards; past it, a shard whose lanes show
records is still asked, briefly, so one hanging shard fails only itself.

The shards are stand-ins whose answers come at once or never: what is tested is the router's
clock, not a shard (the real ones are in `tests/integration/test_shards.py`)."""

from __future__ import annotations

import asyncio
import gc
import time
from collections import Counter
from collections.abc import Coroutine
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from cluster.routing import pop_router
from cluster.routing.availability import Availability
from cluster.routing.pop_router import Popped, PopRouter
from foundation.config import Settings
from foundation.problem import Problem
from revive.service import PopService

ROUND_S = 0.4
LATE_S = 0.2
TOPIC = "orders"


@pytest.fixture(autouse=True)
def short_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pop_router, "ANSWER_TIMEOUT_S", ROUND_S)
    monkeypatch.setattr(pop_router, "LATE_ASKS_S", LATE_S)


class Shard:
    """A shard's pop service that answers `messages`, or `error`, or never (`None`)."""

    def __init__(
        self,
        messages: list[dict[str, Any]] | None,
        known: bool = False,
        error: Exception | None = None,
    ) -> None:
        self.messages, self.known, self.error, self.asked = messages, known, error, 0

    def service(self) -> PopService:
        service = PopService.__new__(PopService)  # only what the router uses of one
        service.reads = lambda group, topic: self.known  # type: ignore[method-assign]
        service.worth_asking = lambda group, topic: True  # type: ignore[method-assign]
        service.lease = self.lease  # type: ignore[method-assign]
        return service

    def lease(self, *request: object) -> Future[list[dict[str, Any]]]:
        self.asked += 1
        answer: Future[list[dict[str, Any]]] = Future()
        if self.messages is not None:
            answer.set_result(self.messages)
        elif self.error is not None:
            answer.set_exception(self.error)
        return answer


def pop(shards: list[Shard]) -> tuple[list[dict[str, Any]] | Problem, float]:
    """A pop of 10 (no wait) on a worker leading `shards` (shard i serves partition i of the topic):
    (what it answered, or the problem it raised; how long it took)."""
    router = PopRouter(node_of(shards))
    return timed(router.pop("g", TOPIC, 10, 30_000, wait_ms=0, local=False))


def node_of(shards: list[Shard], owners: dict[int, str] | None = None) -> Any:
    """A worker leading `shards` (shard i serves partition i); `owners`: shards led elsewhere."""
    services = {i: shard.service() for i, shard in enumerate(shards)}
    count = len(shards) + len(owners or {})
    return SimpleNamespace(
        settings=Settings(node_id="a-0"),
        shard_map=SimpleNamespace(of_lane=lambda group, topic, partition: partition),
        topic_cache=SimpleNamespace(known=lambda topic: True),
        partitions=lambda topic: count if topic == TOPIC else 0,
        routes=lambda: dict(owners or {}),
        pop_service=services.get,
        url="http://a:9000",
        availability=Availability(),
    )


def timed(call: Coroutine[Any, Any, Any]) -> tuple[Any, float]:
    """What `call` answers (a pop's messages), or the problem it raises; how long it took."""

    async def answer() -> Any:
        try:
            answered = await call
        except Problem as problem:
            return problem
        return answered.messages if isinstance(answered, Popped) else answered

    started = time.monotonic()
    answered = asyncio.run(answer())
    return answered, time.monotonic() - started


def test_shards_that_all_hang_fail_the_pop_once_the_round_is_over() -> None:
    shards = [Shard(None), Shard(None), Shard(None)]
    answer, took_s = pop(shards)
    assert isinstance(answer, Problem) and answer.status == 503 and answer.code == "leader_busy"
    # One bound in all (one per shard would be 3 x 0.4 s); the two not asked in time show no
    # records (they were never asked), so they are not asked late either.
    assert ROUND_S <= took_s < ROUND_S + LATE_S
    assert [shard.asked for shard in shards] == [1, 0, 0]


def test_a_shard_that_kafka_failed_before_it_took_the_pop_answers_that_it_is_busy() -> None:
    failed = KafkaException(KafkaError(KafkaError._TIMED_OUT, "metadata not answered"))
    answer, _ = pop([Shard(None, error=failed)])
    assert isinstance(answer, Problem) and (answer.status, answer.code) == (503, "leader_busy")
    assert "metadata not answered" in answer.detail


def test_past_the_round_a_shard_whose_lanes_show_records_is_still_asked() -> None:
    shards = [Shard(None), Shard([{"value": "a"}], known=True), Shard([], known=True)]
    answer, took_s = pop(shards)
    assert answer == [{"value": "a"}]
    assert ROUND_S <= took_s < ROUND_S + LATE_S
    assert [shard.asked for shard in shards] == [1, 1, 0]  # the empty one is only looked at


def test_late_asks_are_bounded_together() -> None:
    shards = [Shard(None), Shard(None, known=True), Shard(None, known=True)]
    answer, took_s = pop(shards)
    assert isinstance(answer, Problem) and answer.code == "leader_busy"
    assert ROUND_S + LATE_S <= took_s < ROUND_S + 2 * LATE_S
    assert [shard.asked for shard in shards] == [1, 1, 0]


def test_an_owner_that_cannot_be_watched_is_asked_again_after_a_pause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A parked pop watches the owner of the one shard, led elsewhere; the owner answers pops
    (empty) but every watch fails. The pop asks it again once per failed watch, each watch
    after the first WATCH_RETRY_S after the last failed (not thousands of times a second),
    answers empty at its wait's end, and leaves asyncio no task whose error nobody took."""
    monkeypatch.setattr(pop_router, "WATCH_RETRY_S", 0.05)
    calls: Counter[str] = Counter()

    async def unwatchable(node: Any, call: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        calls[call] += 1
        if call == "watch":
            raise Problem(503, "leader_starting", "the owner's shard starts")
        return {"messages": []}

    monkeypatch.setattr(pop_router, "forward", unwatchable)
    unhandled: list[dict[str, Any]] = []

    async def parked_pop() -> Popped:
        asyncio.get_running_loop().set_exception_handler(
            lambda _, context: unhandled.append(context)
        )
        router = PopRouter(node_of([], owners={0: "http://b:9000"}))
        popped = await router.pop("g", TOPIC, 10, 30_000, wait_ms=300, local=False)
        gc.collect()  # a task's unretrieved error is reported when the task is collected
        await asyncio.sleep(0)
        return popped

    assert asyncio.run(parked_pop()).messages == []
    assert 3 <= calls["watch"] <= 7 and calls["pop"] == calls["watch"] + 1
    assert unhandled == []


def test_a_peers_watch_asks_the_shards_that_must_read_the_group_together() -> None:
    shards = [Shard(None), Shard(None), Shard(None)]
    answer, took_s = timed(PopRouter(node_of(shards)).watch("g", TOPIC, wait_ms=0))
    assert isinstance(answer, Problem) and answer.code == "leader_busy"
    assert ROUND_S <= took_s < 2 * ROUND_S  # one after the other: 3 x 0.4 s
    assert [shard.asked for shard in shards] == [1, 1, 1]
