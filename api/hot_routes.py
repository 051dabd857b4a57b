"""The lean path of the calls a worker serves most: pop, ack, nack, leases, reject, and the
health probe a peer worker sends every second (`cluster.successor`).

A well-formed call (a JSON body, names that match the API's patterns, a body msgspec decodes
into its struct, `api.hot_bodies`) is answered here, in front of FastAPI: no routing through
its middleware stack, no pydantic validation, no per-request dependency, one response start and
one body. Anything else (a malformed body, a field out of bounds, another path) goes on to
FastAPI unchanged, which answers it as it always did (422 with the field and its bounds) and
documents every route in the OpenAPI document. Both answer through `api.pop_calls`. The token
check and the body limit run before either (`api.auth`, `api.body_limit`).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import structlog
from starlette.types import ASGIApp, Receive, Scope, Send

from api.body_limit import read_body, replaying
from api.hot_bodies import decoder_of
from api.node import Node
from api.pop_bodies import AckBody, LeaseBody, NackBody, PopBody, RejectBody
from api.pop_calls import Answer, Caller, pop_call, settle_call
from api.problems import internal_error, respond
from cluster.routing.pop_router import PopRouter
from foundation.config import NAME_PATTERN, TOPIC_PATTERN
from foundation.problem import Problem

log = structlog.get_logger(__name__)

_POP = re.compile(r"/v1/groups/([^/]+)/topics/([^/]+)/pop")
_SETTLE = re.compile(r"/v1/groups/([^/]+)/(ack|nack|leases|reject)")
_NAME, _TOPIC = re.compile(NAME_PATTERN), re.compile(TOPIC_PATTERN)
_POP_BODY = decoder_of(PopBody)
_SETTLE_BODIES = {
    kind: decoder_of(model)
    for kind, model in (
        ("ack", AckBody), ("nack", NackBody), ("leases", LeaseBody), ("reject", RejectBody),
    )
}  # fmt: skip
_JSON = b"application/json"
_HEALTHY = b'{"status":"ok"}'  # as `api.health.healthz` answers
Call = Callable[[Caller], Awaitable[Answer]]


class HotRoutes:
    def __init__(self, app: ASGIApp, node: Node, router: PopRouter) -> None:
        self._app, self._node, self._router = app, node, router

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and scope["path"] == "/healthz":
            await _send_json(send, _HEALTHY)
            return
        if scope["type"] == "http" and scope["method"] == "POST" and _json(scope):
            route = self._route(scope["path"])
            if route is not None:
                body = await read_body(receive)  # read already, within bounds: `api.body_limit`
                if body is None:
                    return  # the client went away
                call = route(body)
                if call is not None:
                    await self._answer(call, scope, receive, send)
                    return
                receive = replaying(body, receive)
        await self._app(scope, receive, send)

    def _route(self, path: str) -> Callable[[bytes], Call | None] | None:
        """The call a path names, to be made of its body; None: not a lean path's."""
        node, router = self._node, self._router
        if found := _POP.fullmatch(path):
            group, topic = found.groups()
            if _NAME.fullmatch(group) and _TOPIC.fullmatch(topic):
                return lambda body: _made(
                    _POP_BODY, body, lambda args, caller: pop_call(
                        node, router, group, topic, args, caller
                    )
                )  # fmt: skip
        elif found := _SETTLE.fullmatch(path):
            group, kind = found.groups()
            if _NAME.fullmatch(group):
                return lambda body: _made(
                    _SETTLE_BODIES[kind], body,
                    lambda args, caller: settle_call(node, kind, group, args, caller),
                )  # fmt: skip
        return None

    async def _answer(self, call: Call, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            answer = await call(Caller.of(scope, self._node))
        except Problem as problem:
            await respond(problem)(scope, receive, send)
            return
        except Exception:  # as FastAPI's handler for it does (`api.problems`)
            log.exception("a pop-group call failed", path=scope["path"])
            await internal_error()(scope, receive, send)
            return
        await _send_json(send, answer.body, close=answer.close)


async def _send_json(send: Send, body: bytes, close: bool = False) -> None:
    headers = [(b"content-type", _JSON), (b"content-length", b"%d" % len(body))]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _made(
    decoder: msgspec.json.Decoder[Any],
    body: bytes,
    call: Callable[[Any, Caller], Awaitable[Answer]],
) -> Call | None:
    try:
        args = decoder.decode(body)
    except msgspec.DecodeError:  # ValidationError included: FastAPI tells the caller why
        return None
    return lambda caller: call(args, caller)


def _json(scope: Scope) -> bool:
    """A JSON body, as FastAPI reads one: no content type, or application/json."""
    for name, value in scope["headers"]:
        if name == b"content-type":
            return value.split(b";", 1)[0].strip().lower() == _JSON
    return True
