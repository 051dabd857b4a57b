"""`POST /v1/topics/{topic}/messages`: produce now, or schedule through the buffer topic.

A delayed message is written to the buffer topic with the same headers a Kafka-native producer
would use, so HTTP and Kafka clients share one path into the delay service. Every message is on
Kafka (acknowledged by the brokers) before the call answers.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Request
from pydantic import BaseModel, Field
from ulid import ULID

from api.deps import get_node
from api.message_body import (
    MessageIn,
    check_size,
    check_topic_name,
    due_ms,
    schedule_headers,
)
from api.node import Node
from api.openapi import GUARDED, WITH_BODY, problems
from api.refused_topics import refused_topic
from api.request_body import RequestBody
from api.schedules import (
    INDEX_WAIT_S,
    buffer_partition,
    freshness_here,
    owner_elsewhere,
    schedule_here,
    wait_for_schedule,
)
from cluster.routing.forwarding import is_forwarded, segment, send
from cluster.routing.topic_lookups import topic_exists
from delay_service import metrics
from delay_service.schedules import Freshness
from foundation.clock import now_ms
from foundation.config import TOPIC_PATTERN
from foundation.problem import Problem

router = APIRouter(prefix="/v1", tags=["messages"], responses=problems(*GUARDED, *WITH_BODY))

VISIBLE_WAIT_S = 5.0
MAX_MESSAGES = 1000


Message = tuple[MessageIn, int | None, str | None]  # with its due time and id when scheduled


class ProduceRequest(RequestBody):
    messages: list[MessageIn] = Field(min_length=1, max_length=MAX_MESSAGES)


class ProduceResult(BaseModel):
    status: Literal["enqueued", "scheduled", "error"]
    id: str | None = None
    deliver_at_ms: int | None = None
    partition: int | None = None
    offset: int | None = None
    code: str | None = None
    detail: str | None = None


class ProduceResponse(BaseModel):
    results: list[ProduceResult]


@router.post(
    "/topics/{topic}/messages", response_model=ProduceResponse, response_model_exclude_none=True
)
async def produce(
    body: ProduceRequest,
    topic: Annotated[str, Path(pattern=TOPIC_PATTERN)],
    request: Request,
    node: Annotated[Node, Depends(get_node)],
) -> ProduceResponse:
    settings = node.settings
    now = now_ms()
    due_times = [
        due_ms(f"messages.{i}", m, now, settings.max_delay_ms) for i, m in enumerate(body.messages)
    ]
    for index, message in enumerate(body.messages):
        check_size(f"messages.{index}", message, settings.max_record_bytes)
    check_topic_name("path.topic", topic)
    refused = refused_topic(node, topic)
    if refused is not None:
        error = ProduceResult(status="error", code=refused[0], detail=refused[1])
        return ProduceResponse(results=[error] * len(body.messages))
    if not await topic_exists(node, topic):
        error = ProduceResult(
            status="error", code="unknown_topic", detail=f"topic {topic!r} does not exist"
        )
        return ProduceResponse(results=[error] * len(body.messages))
    messages = [
        (m, due, None if due is None else m.id or str(ULID()))
        for m, due in zip(body.messages, due_times, strict=True)
    ]
    # A schedule whose shard this worker's index does not follow is sent on to its shard's owner,
    # whose index shows it once ingested (read-your-writes): one call per owner.
    elsewhere = {} if is_forwarded(request) else _by_owner(node, messages)
    forwarded = {index for placed in elsewhere.values() for index in placed}
    results: list[ProduceResult] = [ProduceResult(status="error")] * len(messages)

    async def here(index: int) -> None:
        results[index] = await _send(node, topic, *messages[index])

    async def there(owner: str, placed: list[int]) -> None:
        answers = await _send_to(node, topic, owner, [messages[i] for i in placed])
        if answers is None:  # the owner is away: on the buffer topic they are safe all the same
            answers = await asyncio.gather(*(_send(node, topic, *messages[i]) for i in placed))
        for index, answer in zip(placed, answers, strict=True):
            results[index] = answer

    await asyncio.gather(
        *(here(index) for index in range(len(messages)) if index not in forwarded),
        *(there(owner, placed) for owner, placed in elsewhere.items()),
    )
    return ProduceResponse(results=results)


def _by_owner(node: Node, messages: list[Message]) -> dict[str, list[int]]:
    """The schedules to send on, by the owner of their shard. With no owner known (a shard
    moving) a schedule is written here: ingest applies it once a leader runs."""
    elsewhere: dict[str, list[int]] = {}
    for index, (_, _, schedule_id) in enumerate(messages):
        if schedule_id is None:
            continue
        owner = owner_elsewhere(node, node.shard_map.of_key(schedule_id))
        if owner is not None:
            elsewhere.setdefault(owner, []).append(index)
    return elsewhere


async def _send_to(
    node: Node, topic: str, owner: str, messages: list[Message]
) -> list[ProduceResult] | None:
    """Schedule `messages` through the sidecar at `owner`; its results, in their order. None if
    the owner cannot be reached (a crashed owner stays named until the group notices): the
    caller writes them itself. Should the owner have written them after all, the shard keeps
    the first schedule of each id."""
    metrics.FORWARDED.labels("schedule").inc()
    body = {
        "messages": [
            {**m.model_dump(exclude_none=True, exclude={"delay_ms"}), "deliver_at_ms": due, "id": i}
            for m, due, i in messages
        ]
    }
    try:
        path = f"/v1/topics/{segment(topic)}/messages"
        # The owner may wait for its index to follow the shard, then for the schedule to show.
        answer = await send(node, "POST", owner, path, body, wait_s=INDEX_WAIT_S + VISIBLE_WAIT_S)
    except Problem:
        return None
    try:
        data = answer.json()
        if answer.status_code == 200 and len(data["results"]) == len(messages):
            return [ProduceResult.model_validate(r) for r in data["results"]]
        code, detail = str(data["code"]), str(data["detail"])
    except (ValueError, KeyError, TypeError):  # not kpd's answer (a proxy's page, say)
        code, detail = "produce_failed", f"answered {answer.status_code}: {answer.text[:200]}"
    failed = ProduceResult(status="error", code=code, detail=f"sidecar at {owner}: {detail}"[:500])
    return [failed] * len(messages)


async def _send(
    node: Node, topic: str, message: MessageIn, due: int | None, schedule_id: str | None
) -> Any:
    producer = node.api_producer
    try:
        if due is None:
            sent = await producer.produce(
                topic, message.payload(), message.key_bytes(), message.header_list()
            )
            return ProduceResult(
                status="enqueued", partition=sent.partition(), offset=sent.offset()
            )
        assert schedule_id is not None  # given with every due time
        existing = schedule_here(node, schedule_id)
        if existing is not None:  # idempotent: the first schedule with this id stands
            return ProduceResult(status="scheduled", id=schedule_id, deliver_at_ms=existing.due_ms)
        await producer.produce(
            node.settings.buffer_topic,
            message.payload(),
            message.key_bytes(),
            schedule_headers(message, topic, due, schedule_id),
            partition=await buffer_partition(node, schedule_id),
        )
        # Read-your-writes: a GET or DELETE right after this answer should find the schedule.
        # (Not while its shard has no owner that follows it: nothing here would show it.)
        if await freshness_here(node, node.shard_map.of_key(schedule_id)) is Freshness.CURRENT:
            standing = await wait_for_schedule(
                node, schedule_id, lambda s: s is not None, VISIBLE_WAIT_S
            )
            if standing is not None:  # another call's schedule of this id may have come first
                due = standing.due_ms
        return ProduceResult(status="scheduled", id=schedule_id, deliver_at_ms=due)
    except Exception as error:  # one failed record must not fail the others
        return ProduceResult(status="error", code="produce_failed", detail=str(error)[:500])
