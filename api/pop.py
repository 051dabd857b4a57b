"""Pop-group calls: pop, ack, nack, leases, reject, and group stats.

Only the leader holds leases, so a follower forwards these calls to it (the leader's address comes
from the election group) and relays the answer; callers may talk to any sidecar.
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any

import httpx
import orjson
from fastapi import APIRouter, Depends, Path, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from api.deps import get_sidecar, require_token
from api.problems import Problem
from revive.metrics import REQUEST_SECONDS
from revive.service import PopRequest, PopService, SettleRequest
from sidecar.clock import now_ms
from sidecar.config import NAME_PATTERN, TOPIC_PATTERN
from sidecar.process import Sidecar

router = APIRouter(prefix="/v1/groups", tags=["pop"], dependencies=[Depends(require_token)])

FORWARDED = "x-kpd-forwarded"
MAX_ITEMS = 1000
MAX_INVISIBLE_MS = 43_200_000
GroupName = Annotated[str, Path(pattern=NAME_PATTERN)]
TopicName = Annotated[str, Path(pattern=TOPIC_PATTERN)]
ReceiptText = Annotated[str, Field(min_length=1, max_length=4096)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PopBody(_Body):
    max_messages: int = Field(10, ge=1, le=1000)
    invisible_ms: int | None = Field(None, ge=1000, le=MAX_INVISIBLE_MS)
    wait_ms: int = Field(0, ge=0, le=20_000)


class AckBody(_Body):
    receipts: list[ReceiptText] = Field(min_length=1, max_length=MAX_ITEMS)


class NackItem(_Body):
    receipt: ReceiptText
    delay_ms: int | None = Field(None, ge=0, le=MAX_INVISIBLE_MS)


class NackBody(_Body):
    items: list[NackItem] = Field(min_length=1, max_length=MAX_ITEMS)


class LeaseItem(_Body):
    receipt: ReceiptText
    invisible_ms: int = Field(ge=0, le=MAX_INVISIBLE_MS)


class LeaseBody(_Body):
    items: list[LeaseItem] = Field(min_length=1, max_length=MAX_ITEMS)


class RejectItem(_Body):
    receipt: ReceiptText
    reason: str | None = Field(None, max_length=1000)


class RejectBody(_Body):
    items: list[RejectItem] = Field(min_length=1, max_length=MAX_ITEMS)


@router.post("/{group}/topics/{topic}/pop")
async def pop(
    group: GroupName,
    topic: TopicName,
    body: PopBody,
    request: Request,
    sidecar: Annotated[Sidecar, Depends(get_sidecar)],
) -> Any:
    service = await _leader_service(request, sidecar)
    if service is None:
        return await _forward(request, sidecar)
    if not (
        sidecar.topic_cache.known(topic)
        or await asyncio.to_thread(sidecar.topic_cache.exists, topic)
    ):
        raise Problem(404, "topic_not_found", f"topic {topic!r} does not exist")
    invisible_ms = body.invisible_ms or sidecar.settings.group(group).invisible_ms
    now = now_ms()
    call = PopRequest(group, topic, body.max_messages, invisible_ms, now + body.wait_ms)
    messages = await _answer(service, call, "pop", timeout_s=body.wait_ms / 1000 + 30)
    return _json({"messages": messages})


async def _settle(
    kind: str, group: str, items: list[tuple[str, Any]], request: Request, sidecar: Sidecar
) -> Any:
    service = await _leader_service(request, sidecar)
    if service is None:
        return await _forward(request, sidecar)
    results = await _answer(service, SettleRequest(kind, group, items), kind, timeout_s=30)
    return _json({"results": results})


@router.post("/{group}/ack")
async def ack(
    group: GroupName,
    body: AckBody,
    request: Request,
    sidecar: Annotated[Sidecar, Depends(get_sidecar)],
) -> Any:
    return await _settle("ack", group, [(r, None) for r in body.receipts], request, sidecar)


@router.post("/{group}/nack")
async def nack(
    group: GroupName,
    body: NackBody,
    request: Request,
    sidecar: Annotated[Sidecar, Depends(get_sidecar)],
) -> Any:
    items = [(i.receipt, i.delay_ms) for i in body.items]
    return await _settle("nack", group, items, request, sidecar)


@router.post("/{group}/leases")
async def leases(
    group: GroupName,
    body: LeaseBody,
    request: Request,
    sidecar: Annotated[Sidecar, Depends(get_sidecar)],
) -> Any:
    items = [(i.receipt, i.invisible_ms) for i in body.items]
    return await _settle("leases", group, items, request, sidecar)


@router.post("/{group}/reject")
async def reject(
    group: GroupName,
    body: RejectBody,
    request: Request,
    sidecar: Annotated[Sidecar, Depends(get_sidecar)],
) -> Any:
    return await _settle(
        "reject", group, [(i.receipt, i.reason) for i in body.items], request, sidecar
    )


@router.get("/{group}")
async def group_stats(
    group: GroupName, request: Request, sidecar: Annotated[Sidecar, Depends(get_sidecar)]
) -> Any:
    service = await _leader_service(request, sidecar)
    if service is None:
        return await _forward(request, sidecar)
    stats = await asyncio.to_thread(service.stats, group)
    return {
        "group": group,
        "config": sidecar.settings.group(group).model_dump(),
        "node": sidecar.settings.node_id,
        **stats,
    }


def _json(payload: dict[str, Any]) -> Response:
    """Serialise plain dicts with orjson: FastAPI's generic encoder costs ~µs per field, which
    adds up to milliseconds for a pop of 1000 messages."""
    return Response(orjson.dumps(payload), media_type="application/json")


async def _answer(service: PopService, call: Any, name: str, timeout_s: float) -> Any:
    started = time.perf_counter()
    try:
        return await asyncio.wait_for(asyncio.wrap_future(service.submit(call)), timeout_s)
    except TimeoutError:
        raise Problem(503, "leader_busy", "the pop service did not answer in time") from None
    except RuntimeError as error:
        raise Problem(503, "not_leader", str(error)) from None
    finally:
        REQUEST_SECONDS.labels(name).observe(time.perf_counter() - started)


async def _leader_service(request: Request, sidecar: Sidecar) -> PopService | None:
    """This node's pop service if it leads; None if the call must go to the leader."""
    if sidecar.is_leader:
        if sidecar.pop_service is None:
            raise Problem(
                503,
                "leader_starting",
                "this sidecar is taking over leadership",
                headers={"Retry-After": "1"},
            )
        return sidecar.pop_service
    if request.headers.get(FORWARDED):
        raise Problem(
            503,
            "not_leader",
            "forwarded to a sidecar that no longer leads",
            headers={"Retry-After": "1"},
        )
    return None


async def _forward(request: Request, sidecar: Sidecar) -> Response:
    url = await asyncio.to_thread(sidecar.leader_url)
    if url is None:
        raise Problem(503, "no_leader", "no sidecar leads right now", headers={"Retry-After": "1"})
    headers = {k: v for k, v in request.headers.items() if k in ("authorization", "content-type")}
    try:
        answer = await sidecar.http.request(
            request.method,
            f"{url}{request.url.path}",
            content=await request.body(),
            headers={**headers, FORWARDED: sidecar.settings.node_id},
            timeout=60,
        )
    except httpx.HTTPError as error:
        raise Problem(503, "leader_unreachable", f"leader at {url}: {error}") from None
    return Response(
        answer.content, answer.status_code, media_type=answer.headers.get("content-type")
    )
