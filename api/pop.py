"""Pop-group calls: pop, ack, nack, leases, reject, and group stats.

Each lane is served by the leader of its shard; `api.pop_router` answers from the shards this
worker leads and from their owners elsewhere, so callers may talk to any sidecar.
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any
from urllib.parse import urlsplit

import orjson
from fastapi import APIRouter, Depends, Path, Request, Response

from api.deps import get_node
from api.forwarding import is_forwarded
from api.node import Node
from api.openapi import GUARDED, WITH_BODY, problems
from api.pop_bodies import (
    AckBody,
    GroupStats,
    LeaseBody,
    NackBody,
    PopAnswer,
    PopBody,
    RejectBody,
    SettleAnswer,
)
from api.pop_router import WATCH, PopRouter
from api.pop_turns import CLIENTS_POP_HERE
from api.problems import Problem
from api.refused_topics import refused_topic
from api.settle_router import settle
from api.topic_lookups import topic_exists
from foundation.config import NAME_PATTERN, TOPIC_PATTERN
from revive.metrics import REQUEST_SECONDS

router = APIRouter(prefix="/v1/groups", tags=["pop"], responses=problems(*GUARDED, 503))

GroupName = Annotated[str, Path(pattern=NAME_PATTERN)]
TopicName = Annotated[str, Path(pattern=TOPIC_PATTERN)]
SETTLE = {"response_model": SettleAnswer, "responses": problems(*WITH_BODY)}


@router.post(
    "/{group}/topics/{topic}/pop", response_model=PopAnswer, responses=problems(*WITH_BODY, 403)
)
async def pop(
    group: GroupName,
    topic: TopicName,
    body: PopBody,
    request: Request,
    node: Annotated[Node, Depends(get_node)],
) -> Any:
    refused = refused_topic(node, topic, group)
    if refused is not None:
        raise Problem(403, *refused)
    if not await topic_exists(node, topic):
        raise Problem(404, "topic_not_found", f"topic {topic!r} does not exist")
    router_ = _router(request)
    if request.headers.get(WATCH):  # a peer's long poll: how many records wait, nothing leased
        available = await router_.watch(group, topic, body.wait_ms)
        here = router_.turns.clients_pop_here(group, topic)
        return _json({"messages": [], "available": available, CLIENTS_POP_HERE: here})
    invisible_ms = body.invisible_ms or node.settings.group(group).invisible_ms
    forwarded, started = is_forwarded(request), time.perf_counter()
    try:
        popped = await router_.pop(
            group, topic, body.max_messages, invisible_ms, body.wait_ms, forwarded
        )
    finally:
        REQUEST_SECONDS.labels("pop").observe(time.perf_counter() - started)
    payload: dict[str, Any] = {"messages": popped.messages}
    if forwarded:  # tell the peer whether clients pop this (group, topic) here
        payload[CLIENTS_POP_HERE] = router_.turns.clients_pop_here(group, topic)
    answer = _json(payload)
    if popped.elsewhere and _through_shared_port(request, node):
        # This worker's lanes had nothing and another worker's had: the client's next call
        # comes on a new connection, which the kernel may give to a worker with records. Few
        # long-lived connections spread unevenly over a sidecar's workers; without this, the
        # worker holding the most of them forwarded every pop once its own lanes ran dry, and
        # every ack of what it handed out (BENCHMARKS.md, 2026-11-26 08:00).
        answer.headers["connection"] = "close"
    return answer


async def _settle(kind: str, group: str, items: list[tuple[str, Any]], request: Request) -> Any:
    started = time.perf_counter()
    try:
        node: Node = request.app.state.node
        results = await settle(node, kind, group, items, is_forwarded(request))
    finally:
        REQUEST_SECONDS.labels(kind).observe(time.perf_counter() - started)
    return _json({"results": results})


@router.post("/{group}/ack", **SETTLE)
async def ack(group: GroupName, body: AckBody, request: Request) -> Any:
    return await _settle("ack", group, [(r, None) for r in body.receipts], request)


@router.post("/{group}/nack", **SETTLE)
async def nack(group: GroupName, body: NackBody, request: Request) -> Any:
    return await _settle("nack", group, [(i.receipt, i.delay_ms) for i in body.items], request)


@router.post("/{group}/leases", **SETTLE)
async def leases(group: GroupName, body: LeaseBody, request: Request) -> Any:
    items = [(i.receipt, i.invisible_ms) for i in body.items]
    return await _settle("leases", group, items, request)


@router.post("/{group}/reject", **SETTLE)
async def reject(group: GroupName, body: RejectBody, request: Request) -> Any:
    return await _settle("reject", group, [(i.receipt, i.reason) for i in body.items], request)


@router.get("/{group}", response_model=GroupStats)
async def group_stats(
    group: GroupName, request: Request, node: Annotated[Node, Depends(get_node)]
) -> Any:
    stats = await _router(request).stats(group, is_forwarded(request))
    return {
        "group": group,
        "config": node.settings.group(group).model_dump(),
        "node": node.settings.node_id,
        **stats,
    }


def _json(payload: dict[str, Any]) -> Response:
    """Serialise plain dicts with orjson: FastAPI's generic encoder costs ~µs per field, which
    adds up to milliseconds for a pop of 1000 messages."""
    try:
        content = orjson.dumps(payload)
    except orjson.JSONEncodeError:
        # A receipt echoed back may hold a lone surrogate (JSON allows "\ud800", UTF-8 does
        # not); the standard encoder escapes it as the client sent it.
        content = json.dumps(payload).encode()
    return Response(content, media_type="application/json")


def _through_shared_port(request: Request, node: Node) -> bool:
    """Did the call come in on the port this sidecar's workers share (not this worker's own)?"""
    server = request.scope.get("server")
    own_port = urlsplit(node.url).port
    return node.settings.workers > 1 and server is not None and server[1] != own_port


def _router(request: Request) -> PopRouter:
    router_: PopRouter = request.app.state.pop_router
    return router_
