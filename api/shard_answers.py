"""The answer of a shard led by this worker: its pop service answers a request through a future."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from typing import Any

from api.problems import Problem, leadership_moving

ANSWER_TIMEOUT_S = 30.0


async def shard_answer(future: Future[Any]) -> Any:
    """What the service answered; a 503 when it did not in time, or stopped leading first."""
    try:
        return await asyncio.wait_for(asyncio.wrap_future(future), ANSWER_TIMEOUT_S)
    except TimeoutError:
        raise Problem(503, "leader_busy", "the pop service did not answer in time") from None
    except RuntimeError as error:  # the service stopped leading before it took the call
        raise leadership_moving("not_leader", str(error)) from None
