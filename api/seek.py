"""`POST /v1/groups/{group}/topics/{topic}/seek`: a group's position in a topic moves.

`revive.seek` applies it in each shard.

The worker that takes the call gives the seek its stamp (later than any earlier seek's of the
(group, topic), `revive.seek_stamps`) and sends it to every shard (`cluster.routing.every_shard`):
each moves the partitions of the topic it serves, and any may hold the topic's retry copies; a
forwarded seek carries the stamp. If a shard cannot apply it now, the call fails with that shard's
503 and a retry finishes the seek (with a later stamp: what the first try moved is moved again).
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field, model_validator

from api.deps import get_node
from api.node import Node
from api.openapi import GUARDED, WITH_BODY, problems
from api.pop import GroupName, TopicName
from api.refused_topics import refused_topic
from api.request_body import RequestBody
from cluster.routing.every_shard import on_every_shard, shards_asked
from cluster.routing.forwarding import forward, is_forwarded, segment
from cluster.routing.topic_lookups import partition_count
from foundation.clock import now_ms
from foundation.config import Settings
from foundation.kafka_clients import base_config, state_consumer
from foundation.problem import Problem
from revive import seek_stamps
from revive.requests import SeekRequest

router = APIRouter(prefix="/v1/groups", tags=["queue operations"], responses=problems(*GUARDED))

STAMP = "x-kpd-seek-stamp"  # a forwarded seek's stamp
MAX_TIME_MS = 10**15 - 1  # as `kpd-deliver-at`: 15 digits, some 31,000 years


class SeekBody(RequestBody):
    to: Literal["earliest", "latest"] | None = Field(
        None, description="an end of each partition; `latest` purges the backlog"
    )
    time_ms: int | None = Field(
        None, ge=0, le=MAX_TIME_MS,
        description="the first message at or after this time (epoch ms), else the end",
    )  # fmt: skip

    @model_validator(mode="after")
    def _one_target(self) -> SeekBody:
        if (self.to is None) == (self.time_ms is None):
            raise ValueError("give exactly one of `to` and `time_ms`")
        return self


class SeekPosition(BaseModel):
    partition: int
    offset: int = Field(description="the next offset pops of the group get from the partition")


class SeekAnswer(BaseModel):
    partitions: list[SeekPosition]


@router.post(
    "/{group}/topics/{topic}/seek",
    response_model=SeekAnswer,
    responses=problems(*WITH_BODY, 403, 503),
)
async def seek(
    group: GroupName,
    topic: TopicName,
    body: SeekBody,
    request: Request,
    node: Annotated[Node, Depends(get_node)],
) -> Any:
    refused = refused_topic(node, topic, group)
    if refused is not None:
        raise Problem(403, *refused)
    if await partition_count(node, topic) == 0:
        raise Problem(404, "topic_not_found", f"topic {topic!r} does not exist")
    shards = shards_asked(node, request)
    if is_forwarded(request):
        stamp = _stamp_forwarded(request)
    else:
        stamp = await asyncio.to_thread(new_stamp, node.settings, group, topic)
    seek_request = SeekRequest(group, topic, body.to, body.time_ms, stamp)
    path = f"/v1/groups/{segment(group)}/topics/{segment(topic)}/seek"
    sent = body.model_dump(exclude_none=True)

    async def there(url: str, headers: dict[str, str]) -> list[dict[str, Any]]:
        answer = await forward(node, "seek", url, path, sent, {**headers, STAMP: str(stamp)})
        return list(answer["partitions"])

    answers = await on_every_shard(
        node, shards, request, lambda service: service.seek(seek_request), there
    )
    moved = [position for answer in answers for position in answer]
    return {"partitions": sorted(moved, key=lambda position: position["partition"])}


def new_stamp(settings: Settings, group: str, topic: str) -> int:
    """A stamp later than every earlier seek's of (group, topic), from the group's offsets."""
    consumer = state_consumer(base_config(settings), group)
    try:
        known = seek_stamps.committed_stamp(consumer, topic, settings.kafka_timeout_ms / 1000)
    finally:
        consumer.close()
    return max(now_ms(), known + 1)


def _stamp_forwarded(request: Request) -> int:
    stamp = seek_stamps.parse(request.headers.get(STAMP, ""))
    if stamp == 0:
        raise Problem(400, "bad_request", f"a forwarded seek needs {STAMP}")
    return stamp
