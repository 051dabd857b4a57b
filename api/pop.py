"""Pop-group calls: pop, ack, nack, leases, reject, and group stats, as FastAPI routes.

Each lane is served by the leader of its shard; `cluster.routing.pop_router` answers from the shards
this worker leads and from their owners elsewhere, so callers may talk to any sidecar. What the
calls answer is `api.pop_calls`; well-formed ones are served by `api.hot_routes` before they reach
FastAPI, and these routes answer the rest (422 with the field and its bounds) and document them.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request, Response

from api.ack_produce import ack_produce_call
from api.deps import get_node
from api.node import Node
from api.openapi import GUARDED, WITH_BODY, problems
from api.pop_bodies import (
    AckProduceBody,
    GroupStats,
    LeaseBody,
    NackBody,
    PopAnswer,
    PopBody,
    RejectBody,
    SettleAnswer,
)
from api.pop_calls import Answer, Caller, pop_call, settle_call
from cluster.routing.forwarding import is_forwarded
from cluster.routing.group_stats import merged_group_stats
from cluster.routing.pop_router import PopRouter
from foundation.config import NAME_PATTERN, TOPIC_PATTERN

router = APIRouter(prefix="/v1/groups", tags=["pop"], responses=problems(*GUARDED, 503))

GroupName = Annotated[str, Path(pattern=NAME_PATTERN)]
TopicName = Annotated[str, Path(pattern=TOPIC_PATTERN)]
SETTLE = {"response_model": SettleAnswer, "responses": problems(*WITH_BODY)}


@router.post(
    "/{group}/topics/{topic}/pop", response_model=PopAnswer, responses=problems(*WITH_BODY, 403)
)
async def pop(group: GroupName, topic: TopicName, body: PopBody, request: Request) -> Any:
    node: Node = request.app.state.node
    caller = Caller.of(request.scope, node)
    return _response(await pop_call(node, _router(request), group, topic, body, caller))


async def _settle(kind: str, group: str, body: Any, request: Request) -> Any:
    node: Node = request.app.state.node
    return _response(await settle_call(node, kind, group, body, Caller.of(request.scope, node)))


@router.post(
    "/{group}/ack",
    response_model=SettleAnswer,
    response_model_exclude_none=True,
    responses=problems(*WITH_BODY, 403, 409),
)
async def ack(group: GroupName, body: AckProduceBody, request: Request) -> Any:
    """Ack receipts. With `produce`, also write records, all in one transaction: every receipt
    acked and every record written, or 409 `not_acked` and nothing changed."""
    if body.produce is None:
        return await _settle("ack", group, body, request)
    node: Node = request.app.state.node
    return _response(await ack_produce_call(node, group, body, Caller.of(request.scope, node)))


@router.post("/{group}/nack", **SETTLE)
async def nack(group: GroupName, body: NackBody, request: Request) -> Any:
    return await _settle("nack", group, body, request)


@router.post("/{group}/leases", **SETTLE)
async def leases(group: GroupName, body: LeaseBody, request: Request) -> Any:
    return await _settle("leases", group, body, request)


@router.post("/{group}/reject", **SETTLE)
async def reject(group: GroupName, body: RejectBody, request: Request) -> Any:
    return await _settle("reject", group, body, request)


@router.get("/{group}", response_model=GroupStats)
async def group_stats(
    group: GroupName, request: Request, node: Annotated[Node, Depends(get_node)]
) -> Any:
    stats = await merged_group_stats(node, group, is_forwarded(request))
    return {
        "group": group,
        "config": node.settings.group(group).model_dump(),
        "node": node.settings.node_id,
        **stats,
    }


def _response(answer: Answer) -> Response:
    response = Response(answer.body, media_type="application/json")
    if answer.close:
        response.headers["connection"] = "close"
    return response


def _router(request: Request) -> PopRouter:
    router_: PopRouter = request.app.state.pop_router
    return router_
