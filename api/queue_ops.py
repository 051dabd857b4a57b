"""Queue operations on a pop group: `POST /v1/groups/{group}/redrive` (`revive.redrive`).

A redrive runs in a thread of the worker that takes the call, whichever sidecar that is: it
needs no shard's leader, since its own transactional id keeps two redrives of a group apart.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from confluent_kafka import KafkaError, KafkaException
from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from api.deps import get_node
from api.node import Node
from api.openapi import GUARDED, WITH_BODY, problems
from api.pop import GroupName
from api.problems import Problem
from api.request_body import RequestBody
from foundation.config import TOPIC_PATTERN
from revive.redrive import RedriveRequest, redrive

router = APIRouter(prefix="/v1/groups", tags=["queue operations"], responses=problems(*GUARDED))

# What a redrive's producer raises once a newer redrive of the group has fenced it: the fence
# itself, or `_FATAL` from a produce after it (fencing is what makes a transactional producer
# fail for good).
_FENCED = frozenset(
    {
        KafkaError._FENCED,
        KafkaError._FATAL,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    }
)


class RedriveBody(RequestBody):
    max_messages: int = Field(10_000, ge=1, le=100_000)
    topic: str | None = Field(
        None, pattern=TOPIC_PATTERN, description="only dead letters of this origin topic"
    )


class RedriveAnswer(BaseModel):
    moved: int = Field(description="dead letters sent back to the group by this call")
    remaining: int = Field(
        description="dead letters (of `topic`, if given) this call found and left in the DLQ"
    )


@router.post(
    "/{group}/redrive",
    response_model=RedriveAnswer,
    responses=problems(*WITH_BODY, 404, 409),
)
async def redrive_dead_letters(
    group: GroupName, body: RedriveBody, node: Annotated[Node, Depends(get_node)]
) -> Any:
    dlq = node.settings.group(group).dlq_topic
    assert dlq is not None
    if await asyncio.to_thread(node.partitions, dlq) == 0:
        raise Problem(
            404, "group_not_found", f"group {group!r} has no dead-letter topic: it never popped"
        )
    request = RedriveRequest(group, body.max_messages, body.topic)
    try:
        answer = await asyncio.to_thread(redrive, node.settings, request)
    except KafkaException as error:
        if error.args[0].code() not in _FENCED:
            raise
        raise Problem(
            409, "redrive_running", "a newer redrive of this group started and stopped this one"
        ) from error
    return {"moved": answer.moved, "remaining": answer.remaining}
