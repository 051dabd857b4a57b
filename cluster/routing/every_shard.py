"""A call every shard must apply (seek, group delete): here for the shards led here, once per
owner elsewhere for theirs, the forwarded call naming them (`SHARDS`).

The call answers once every shard has; one that cannot now fails the call with its 503, which a
client retries (the operations are safe to apply again).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import Any

from fastapi import Request

from cluster.routing.forwarding import is_forwarded
from cluster.routing.node import RoutingNode
from cluster.routing.shard_answers import shard_answer, shard_route
from foundation.problem import Problem
from revive.service import PopService

SHARDS = "x-kpd-shards"  # a forwarded call's shards, comma-separated


def shards_asked(node: RoutingNode, request: Request) -> list[int]:
    """The shards a call is for: every one, or those a forwarding peer named."""
    if not is_forwarded(request):
        return list(range(node.shard_map.shards))
    named = request.headers.get(SHARDS, "").split(",")
    shards = [int(s) for s in named if s.isascii() and s.isdigit() and len(s) <= 6]
    if not shards or any(shard >= node.shard_map.shards for shard in shards):
        raise Problem(400, "bad_request", f"a forwarded call names its shards in {SHARDS}")
    return shards


async def on_every_shard(
    node: RoutingNode,
    shards: list[int],
    request: Request,
    here: Callable[[PopService], Future[Any]],
    there: Callable[[str, dict[str, str]], Awaitable[Any]],
) -> list[Any]:
    """Each shard's answer: `here(service)` for a shard led here, `there(owner's url, headers)`
    (one answer for all the shards named in the headers) for the others."""
    local, owners = is_forwarded(request), node.routes()
    remote: dict[str, list[int]] = {}
    calls = []
    for shard in shards:
        route = shard_route(node, shard, local, owners)
        if isinstance(route, str):
            remote.setdefault(route, []).append(shard)
        else:
            calls.append(shard_answer(here(route)))
    for url, theirs in remote.items():
        calls.append(there(url, {SHARDS: ",".join(map(str, theirs))}))
    return list(await asyncio.gather(*calls))
