"""`POST /v1/topics/{topic}/messages`: produce now, or schedule through the buffer topic.

A delayed message is written to the buffer topic with the same headers a Kafka-native producer
would use, so HTTP and Kafka clients share one path into the delay service. Every message is on
Kafka (acknowledged by the brokers) before the call answers.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Request
from pydantic import BaseModel, Field, model_validator
from ulid import ULID

from api.deps import get_node
from api.forwarding import is_forwarded, segment, send
from api.node import Node
from api.openapi import GUARDED, WITH_BODY, problems
from api.problems import Problem
from api.refused_topics import refused_topic
from api.request_body import RequestBody
from api.schedules import (
    ID_PATTERN,
    INDEX_WAIT_S,
    buffer_partition,
    freshness_here,
    owner_elsewhere,
    schedule_here,
    wait_for_schedule,
)
from api.topic_lookups import topic_exists
from delay_service import metrics
from delay_service.headers import CONTROL_HEADERS, DELIVER_AT, ID, TARGET
from delay_service.schedules import Freshness
from foundation.clock import now_ms
from foundation.config import TOPIC_PATTERN
from foundation.record_size import record_bytes

router = APIRouter(prefix="/v1", tags=["messages"], responses=problems(*GUARDED, *WITH_BODY))

VISIBLE_WAIT_S = 5.0
MAX_MESSAGES = 1000


class MessageIn(RequestBody):
    """One message: `value` or `value_b64` (not both); `delay_ms` or `deliver_at_ms` (not both)
    to schedule it; `id` only with one of them. kpd's control headers are refused."""

    key: str | None = None
    value: str | None = None
    value_b64: str | None = None
    headers: dict[Annotated[str, Field(min_length=1, max_length=255)], str] | None = Field(
        None, max_length=100
    )
    delay_ms: int | None = Field(None, ge=0)
    deliver_at_ms: int | None = Field(None, ge=0)
    id: str | None = Field(None, pattern=ID_PATTERN)

    @model_validator(mode="after")
    def _one_of_each(self) -> MessageIn:
        if self.value is not None and self.value_b64 is not None:
            raise ValueError("give value or value_b64, not both")
        if self.delay_ms is not None and self.deliver_at_ms is not None:
            raise ValueError("give delay_ms or deliver_at_ms, not both")
        if self.value_b64 is not None:
            try:
                base64.b64decode(self.value_b64, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError("value_b64 is not valid base64") from None
        texts = [self.key, self.value, *(self.headers or {}), *(self.headers or {}).values()]
        for text in texts:
            try:
                (text or "").encode()
            except UnicodeEncodeError:  # JSON allows lone surrogates like "\ud800"; UTF-8 not
                raise ValueError("key, value and headers must be valid Unicode text") from None
        if self.headers and CONTROL_HEADERS & set(self.headers):
            raise ValueError(f"headers may not set kpd control headers {sorted(CONTROL_HEADERS)}")
        if self.id is not None and self.delay_ms is None and self.deliver_at_ms is None:
            raise ValueError("id names a schedule: give delay_ms or deliver_at_ms with it")
        return self

    def payload(self) -> bytes | None:
        if self.value_b64 is not None:
            return base64.b64decode(self.value_b64)
        return None if self.value is None else self.value.encode()

    def header_list(self) -> list[tuple[str, bytes]]:
        return [(name, value.encode()) for name, value in (self.headers or {}).items()]

    def size(self) -> int:
        """Counted as the buffer ingest counts it, so what HTTP accepts the delay service does."""
        return record_bytes(_key(self), self.payload(), self.header_list())


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
    due_times = [_due_ms(i, m, now, settings.max_delay_ms) for i, m in enumerate(body.messages)]
    for index, message in enumerate(body.messages):
        size = message.size()  # decodes value_b64: once
        if size > settings.max_record_bytes:
            raise Problem(
                413,
                "record_too_large",
                f"messages.{index} is {size} bytes; the limit is {settings.max_record_bytes}",
                field=f"messages.{index}",
                max_bytes=settings.max_record_bytes,
            )
    if topic in (".", ".."):  # the pattern lets these through; Kafka never names a topic so
        raise Problem(
            422,
            "invalid_request",
            "request failed validation",
            errors=[{"field": "path.topic", "message": f"{topic!r} is not a valid topic name"}],
        )
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


def _due_ms(index: int, message: MessageIn, now: int, max_delay_ms: int) -> int | None:
    if message.delay_ms is not None:
        delay = message.delay_ms
    elif message.deliver_at_ms is not None:
        delay = message.deliver_at_ms - now
    else:
        return None
    if delay > max_delay_ms:
        field = "delay_ms" if message.delay_ms is not None else "deliver_at_ms"
        raise Problem(
            422,
            "invalid_request",
            "request failed validation",
            errors=[
                {
                    "field": f"body.messages.{index}.{field}",
                    "message": f"the delay may be at most {max_delay_ms} ms",
                    "bounds": {"ge": 0, "max_delay_ms": max_delay_ms},
                }
            ],
        )
    return now + delay if message.delay_ms is not None else message.deliver_at_ms


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
                topic, message.payload(), _key(message), message.header_list()
            )
            return ProduceResult(
                status="enqueued", partition=sent.partition(), offset=sent.offset()
            )
        assert schedule_id is not None  # given with every due time
        existing = schedule_here(node, schedule_id)
        if existing is not None:  # idempotent: the first schedule with this id stands
            return ProduceResult(status="scheduled", id=schedule_id, deliver_at_ms=existing.due_ms)
        control = [
            (TARGET, topic.encode()),
            (DELIVER_AT, str(due).encode()),
            (ID, schedule_id.encode()),
        ]
        await producer.produce(
            node.settings.buffer_topic,
            message.payload(),
            _key(message),
            [*message.header_list(), *control],
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


def _key(message: MessageIn) -> bytes | None:
    return None if message.key is None else message.key.encode()
