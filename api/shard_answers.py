"""The answer of a shard led by this worker: its pop service answers a request through a future."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from typing import Any

from api.problems import Problem, leadership_moving

# How long a call waits for this worker's shards, all it asks together (`api.pop_router`): a Kafka
# commit or the fetchers of a shard just taken over can take many seconds with a slow broker. Below
# what a peer that forwarded the call waits for it (`api.forwarding`).
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


def busy() -> Problem:
    return Problem(503, "leader_busy", "the pop service did not answer in time")
