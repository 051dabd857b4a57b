"""The answer of a shard led by this worker: its pop service answers a request through a future."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from typing import Any

from confluent_kafka import KafkaException

from cluster.routing.node import RoutingNode
from foundation.problem import Problem, leadership_moving
from revive.service import PopService

# How long a call waits for this worker's shards, all it asks together
# (`cluster.routing.pop_router`): a Kafka commit or the fetchers of a shard just taken over can take
# many seconds with a slow broker. Below what a peer that forwarded the call waits for it
# (`cluster.routing.forwarding`).
ANSWER_TIMEOUT_S = 20.0
# Past it, the call's other shards are asked only if their lanes show records, for this long in all:
# one shard that does not answer fails only itself, and the call stays bounded.
LATE_ASKS_S = 2.0


async def shard_answer(future: Future[Any], timeout_s: float = ANSWER_TIMEOUT_S) -> Any:
    """What the service answered; a 503 when it did not in time, or stopped leading first."""
    try:
        return await asyncio.wait_for(asyncio.wrap_future(future), timeout_s)
    except TimeoutError:
        raise busy() from None
    except RuntimeError as error:  # the service stopped leading before it took the call
        raise leadership_moving("not_leader", str(error)) from None
    except KafkaException as error:  # Kafka did not answer what the shard needed to take it
        raise Problem(503, "leader_busy", f"Kafka did not answer: {error}") from None


def busy() -> Problem:
    return Problem(503, "leader_busy", "the pop service did not answer in time")


def shard_route(
    node: RoutingNode, shard: int, local: bool, owners: dict[int, str]
) -> PopService | str:
    """Who serves a call for `shard`: its pop service here, or the address of its owner
    elsewhere (`owners`: `RoutingNode.routes()`); a 503 when neither can now, or when a forwarded
    (`local`) call finds it led elsewhere."""
    service = node.pop_service(shard)
    if service is not None:
        return service
    if owners.get(shard) == node.url:  # led here: its pop role is (re)starting
        raise leadership_moving("leader_starting", f"shard {shard}'s pop service starts")
    if local or shard not in owners:
        raise leadership_moving("no_leader", f"no sidecar leads shard {shard} now")
    return owners[shard]
