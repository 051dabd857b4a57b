"""`POST /v1/groups/{group}/topics/{topic}/seek`: a group's position in a topic moves.

`revive.seek` applies it in each shard.

The worker that takes the call gives the seek its stamp (later than any earlier seek's of the
(group, topic), `revive.seek_stamps`) and sends it to every shard: each moves the partitions of
the topic it serves, and any may hold the topic's retry copies. Shards led elsewhere get the
call forwarded, with the stamp and their numbers, once per owner. The call answers once every
shard has applied it; if one cannot now, it fails with that shard's 503 and a retry finishes the
seek (with a later stamp: what the first try moved is moved again).
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field, model_validator

from api.deps import get_node
from api.forwarding import forward, is_forwarded, segment
from api.node import Node
from api.openapi import GUARDED, WITH_BODY, problems
from api.pop import GroupName, TopicName
from api.problems import Problem
from api.refused_topics import refused_topic
from api.request_body import RequestBody
from api.shard_answers import shard_answer, shard_route
from api.topic_lookups import partition_count
from foundation.clock import now_ms
from foundation.config import Settings
from foundation.kafka_clients import base_config, state_consumer
from revive import seek_stamps
from revive.requests import SeekRequest

router = APIRouter(prefix="/v1/groups", tags=["queue operations"], responses=problems(*GUARDED))

STAMP = "x-kpd-seek-stamp"  # a forwarded seek's stamp ...
SHARDS = "x-kpd-seek-shards"  # ... and the shards it is for, comma-separated
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
    if is_forwarded(request):
        stamp, shards = _forwarded(request)
    else:
        stamp = await asyncio.to_thread(new_stamp, node.settings, group, topic)
        shards = list(range(node.shard_map.shards))
    seek_request = SeekRequest(group, topic, body.to, body.time_ms, stamp)
    moved = await _on_shards(node, seek_request, body, shards, is_forwarded(request))
    return {"partitions": sorted(moved, key=lambda position: position["partition"])}


def new_stamp(settings: Settings, group: str, topic: str) -> int:
    """A stamp later than every earlier seek's of (group, topic), from the group's offsets."""
    consumer = state_consumer(base_config(settings), group)
    try:
        known = seek_stamps.committed_stamp(consumer, topic, settings.kafka_timeout_ms / 1000)
    finally:
        consumer.close()
    return max(now_ms(), known + 1)


def _forwarded(request: Request) -> tuple[int, list[int]]:
    stamp = seek_stamps.parse(request.headers.get(STAMP, ""))
    shards = [int(s) for s in request.headers.get(SHARDS, "").split(",") if s.isdigit()]
    if stamp == 0 or not shards:
        raise Problem(400, "bad_request", f"a forwarded seek needs {STAMP} and {SHARDS}")
    return stamp, shards


async def _on_shards(
    node: Node, request: SeekRequest, body: SeekBody, shards: list[int], local: bool
) -> list[dict[str, Any]]:
    """Apply the seek on `shards`: here for those led here, through their owners for the others
    (all of them answered, or the first failure raised)."""
    owners, remote = node.routes(), dict[str, list[int]]()
    calls = []
    for shard in shards:
        if node.shard_map.shards <= shard:
            raise Problem(400, "bad_request", f"no shard {shard}")
        route = shard_route(node, shard, local, owners)
        if isinstance(route, str):
            remote.setdefault(route, []).append(shard)
        else:
            calls.append(shard_answer(route.seek(request)))
    path = f"/v1/groups/{segment(request.group)}/topics/{segment(request.topic)}/seek"
    for url, theirs in remote.items():
        headers = {STAMP: str(request.stamp), SHARDS: ",".join(map(str, theirs))}
        calls.append(
            _partitions(
                forward(node, "seek", url, path, body.model_dump(exclude_none=True), headers)
            )
        )
    answers = await asyncio.gather(*calls)
    return [position for answer in answers for position in answer]


async def _partitions(answer: Any) -> list[dict[str, Any]]:
    return list((await answer)["partitions"])
