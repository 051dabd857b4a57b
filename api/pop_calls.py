"""What the pop, ack, nack, leases and reject calls answer, whichever HTTP layer brought them:
FastAPI's routes (`api.pop`, which also publish them in the OpenAPI document) or the lean path
for well-formed calls (`api.hot_routes`). Errors are raised as `Problem`s.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson
from starlette.types import Scope

from api.node import Node
from api.refused_topics import refused_topic
from cluster.routing.forwarding import FORWARDED
from cluster.routing.pop_router import WATCH, PopRouter
from cluster.routing.pop_turns import CLIENTS_POP_HERE
from cluster.routing.settle_router import settle
from cluster.routing.topic_lookups import topic_exists
from foundation.problem import Problem
from revive.metrics import REQUEST_SECONDS

_FORWARDED, _WATCH = FORWARDED.encode(), WATCH.encode()


@dataclass(frozen=True)
class Caller:
    """What an answer depends on besides the call's body."""

    forwarded: bool  # a peer sent it on: answered from this worker's shards only
    watch: bool  # a peer's long poll that only asks whether records wait
    shared_port: bool  # it came on the port this sidecar's workers share

    @classmethod
    def of(cls, scope: Scope, node: Node) -> Caller:
        names = {name for name, _ in scope["headers"]}
        server = scope.get("server")
        own_port = urlsplit(node.url).port
        shared = node.settings.workers > 1 and server is not None and server[1] != own_port
        return cls(_FORWARDED in names, _WATCH in names, shared)


@dataclass(frozen=True)
class Answer:
    body: bytes  # application/json
    close: bool = False  # ask the client to come back on a new connection


async def pop_call(
    node: Node, router: PopRouter, group: str, topic: str, body: Any, caller: Caller
) -> Answer:
    """`body` has `max_messages`, `invisible_ms` (None: the group's) and `wait_ms`."""
    refused = refused_topic(node, topic, group)
    if refused is not None:
        raise Problem(403, *refused)
    if not await topic_exists(node, topic):
        raise Problem(404, "topic_not_found", f"topic {topic!r} does not exist")
    if caller.watch:
        available = await router.watch(group, topic, body.wait_ms)
        here = router.turns.clients_pop_here(group, topic)
        return Answer(json_bytes({"messages": [], "available": available, CLIENTS_POP_HERE: here}))
    invisible_ms = body.invisible_ms or node.settings.group(group).invisible_ms
    started = time.perf_counter()
    try:
        popped = await router.pop(
            group, topic, body.max_messages, invisible_ms, body.wait_ms, caller.forwarded
        )
    finally:
        REQUEST_SECONDS.labels("pop").observe(time.perf_counter() - started)
    payload: dict[str, Any] = {"messages": popped.messages}
    if caller.forwarded:  # tell the peer whether clients pop this (group, topic) here
        payload[CLIENTS_POP_HERE] = router.turns.clients_pop_here(group, topic)
    # This worker's lanes had nothing and another worker's had: the client's next call comes
    # on a new connection, which the kernel may give to a worker with records. Else the worker
    # holding most of a few long-lived connections forwarded every pop once its lanes ran dry.
    return Answer(json_bytes(payload), close=popped.elsewhere and caller.shared_port)


# Each settle call's items as (receipt, its argument), from its body.
SETTLE_ITEMS: dict[str, Callable[[Any], list[tuple[str, Any]]]] = {
    "ack": lambda body: [(receipt, None) for receipt in body.receipts],
    "nack": lambda body: [(item.receipt, item.delay_ms) for item in body.items],
    "leases": lambda body: [(item.receipt, item.invisible_ms) for item in body.items],
    "reject": lambda body: [(item.receipt, item.reason) for item in body.items],
}
# Every call's series from the start: with several workers (multiprocess mode) a labelled family
# is exported only once it has one, and a dashboard shows "No data" instead of no calls.
for _call in ("pop", *SETTLE_ITEMS):
    REQUEST_SECONDS.labels(_call)


async def settle_call(node: Node, kind: str, group: str, body: Any, caller: Caller) -> Answer:
    """`kind`: ack, nack, leases or reject, with its body (`SETTLE_ITEMS`)."""
    items = SETTLE_ITEMS[kind](body)
    started = time.perf_counter()
    try:
        results = await settle(node, kind, group, items, caller.forwarded)
    finally:
        REQUEST_SECONDS.labels(kind).observe(time.perf_counter() - started)
    return Answer(json_bytes({"results": results}))


def json_bytes(payload: dict[str, Any]) -> bytes:
    """orjson: FastAPI's generic encoder costs microseconds per field, milliseconds for a pop of
    1000 messages."""
    try:
        return orjson.dumps(payload)
    except orjson.JSONEncodeError:
        # A receipt echoed back may hold a lone surrogate (JSON allows "\ud800", UTF-8 does
        # not); the standard encoder escapes it as the client sent it.
        return json.dumps(payload).encode()
