"""Queue operations on a pop group: `POST /v1/groups/{group}/redrive` (`revive.redrive`) and
`DELETE /v1/groups/{group}` (`revive.forget`, `revive.group_removal`).

A redrive runs in a thread of the worker that takes the call, whichever sidecar that is: it
needs no shard's leader, since its own transactional id keeps two redrives of a group apart.
A delete goes to every shard first (each forgets the group's leases and stops reading for it),
then removes the group's offsets from Kafka (and, asked to, its retry and DLQ topics).
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from confluent_kafka import KafkaError, KafkaException
from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field

from api.deps import get_node
from api.node import Node
from api.openapi import GUARDED, WITH_BODY, problems
from api.pop import GroupName
from api.request_body import RequestBody
from cluster.routing.every_shard import on_every_shard, shards_asked
from cluster.routing.forwarding import forward, is_forwarded, segment
from foundation.config import TOPIC_PATTERN
from foundation.problem import Problem
from revive.group_removal import GroupInUse, check_unused, remove_group
from revive.redrive import RedriveRequest, redrive
from revive.requests import ForgetRequest

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


class DeletedGroup(BaseModel):
    group: str
    deleted_topics: list[str] = Field(description="the retry and DLQ topics deleted (`topics`)")


@router.delete("/{group}", response_model=DeletedGroup, responses=problems(404, 409, 503))
async def delete_group(
    group: GroupName,
    request: Request,
    node: Annotated[Node, Depends(get_node)],
    topics: Annotated[bool, Query(description="also delete the retry and DLQ topics")] = False,
) -> Any:
    if is_forwarded(request):  # this worker's shards: the caller does the rest
        await _forget_on_shards(node, request, group)
        return {"group": group, "deleted_topics": []}
    retry_topic = node.settings.group(group).retry_topic
    assert retry_topic is not None
    if not await asyncio.to_thread(node.topic_cache.exists_now, retry_topic):  # rare: ask now
        raise Problem(404, "group_not_found", f"group {group!r} has no retry topic: never popped")
    try:
        await asyncio.to_thread(check_unused, node.settings, group)
        await _forget_on_shards(node, request, group)
        deleted = await asyncio.to_thread(remove_group, node.settings, group, topics)
    except GroupInUse as error:
        raise Problem(409, "group_in_use", str(error)) from None
    return {"group": group, "deleted_topics": deleted}


async def _forget_on_shards(node: Node, request: Request, group: str) -> None:
    path, forgotten = f"/v1/groups/{segment(group)}", ForgetRequest(group)

    async def there(url: str, headers: dict[str, str]) -> Any:
        return await forward(node, "delete", url, path, None, headers, method="DELETE")

    shards = shards_asked(node, request)
    await on_every_shard(node, shards, request, lambda service: service.forget(forgotten), there)
