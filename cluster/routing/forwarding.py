"""Calls sent on to the sidecar (or worker) that owns a shard, and how a peer's call is told apart.

A call a peer forwarded carries `x-kpd-forwarded` (the sender's node id): it is answered from this
worker's own shards and state only, so a call is forwarded at most once, never in a loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any
from urllib.parse import quote

from fastapi import Request, Response

from cluster.routing.node import RoutingNode
from foundation.peer_http import Answer, PeerFailed, PeerUnreachable
from foundation.problem import Problem, leadership_moving
from revive import metrics

FORWARDED = "x-kpd-forwarded"
# What every problem body has (`api.problems.problem_body`); an owner's other fields pass on.
_PROBLEM_FIELDS = frozenset({"type", "title", "status", "code", "detail", "headers"})
# An owner whose host does not answer a connect (gone, cut off) fails the call after this long, as
# a refused one does at once; a connect within a deployment takes milliseconds.
CONNECT_TIMEOUT_S = 2.0
# A live owner may be slow to answer: a Kafka commit, or the fetchers of a shard it has just taken
# over, can take many seconds with a slow broker. A call given up meanwhile may have leased
# records, left invisible until their lease ends, so it is bounded (beyond the wait it asks of
# the owner) only past the owner's own bound on its shards' answers (22 s,
# `cluster.routing.shard_answers`), and below the Python client's (60 s), which would otherwise give
# up first: a pop may wait for its own shards, then for one owner elsewhere
# (`cluster.routing.pop_router`) ...
ANSWER_TIMEOUT_S = 25.0
# ... but a paused owner (SIGSTOP, a frozen VM) or one cut off behind an open connection takes a
# call and never answers: a pop forwarded to one was held for 60 s, then failed, while the asking
# worker's own lanes had records. A call overdue by `OVERDUE_S` asks the owner's /healthz, which
# a live one answers however busy its shards are (on its event loop, which never waits on Kafka);
# with no answer within `PROBE_TIMEOUT_S` the call is given up, as if the owner had refused it.
OVERDUE_S = 2.0
PROBE_TIMEOUT_S = 3.0


class Mute(Exception):
    """The owner took a call, and answers neither it nor a health probe."""


def is_forwarded(request: Request) -> bool:
    """A peer forwarded this call: answer from local shards only."""
    return FORWARDED in request.headers


async def send(
    node: RoutingNode,
    method: str,
    url: str,
    path: str,
    body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    wait_s: float = 0.0,
) -> Answer:
    """Send a call to the sidecar at `url` as a forwarded one (with the API token when one is
    set), which may wait `wait_s` there before it answers; an owner that cannot be reached, or
    does not answer, reads as leadership moving (503, retry soon)."""
    sent = {FORWARDED: node.settings.node_id, **(headers or {})}
    if node.settings.api_token is not None:
        sent["authorization"] = f"Bearer {node.settings.api_token.get_secret_value()}"
    timeout_s = wait_s + ANSWER_TIMEOUT_S
    request = node.http.request(method, url, path, json=body, headers=sent, timeout_s=timeout_s)
    try:
        return await _unless_mute(node, url, request, wait_s + OVERDUE_S)
    except (PeerFailed, Mute) as error:
        # Refused, or mute: nothing there answers, so its shards' next calls go to the member
        # that takes them over (its guardian takes a silent member's shards too). Not a call
        # that outlasted its bound while the owner answered its probes: it is alive.
        if isinstance(error, Mute | PeerUnreachable):
            node.unreachable(url)
        raise leadership_moving("leader_unreachable", f"sidecar at {url}: {error}") from None


async def _unless_mute(
    node: RoutingNode, url: str, request: Awaitable[Answer], overdue_s: float
) -> Answer:
    """The answer to `request`; `Mute` once it is `overdue_s` late and the owner answers no
    health probe either (an answer that comes during a probe is taken, whatever the probe)."""
    call = asyncio.ensure_future(request)
    probe: asyncio.Future[Answer] | None = None
    try:
        await asyncio.wait({call}, timeout=overdue_s)
        while not call.done():
            probe = asyncio.ensure_future(
                node.http.request("GET", url, "/healthz", timeout_s=PROBE_TIMEOUT_S)
            )
            await asyncio.wait({call, probe}, return_when=asyncio.FIRST_COMPLETED)
            if call.done():
                break
            if probe.exception() is not None:
                raise Mute("no answer to the call, nor to /healthz")
            await asyncio.wait({call}, timeout=OVERDUE_S)
        return call.result()
    finally:
        call.cancel()
        if probe is not None:
            probe.cancel()


async def forward(
    node: RoutingNode,
    call: str,
    url: str,
    path: str,
    body: dict[str, Any] | None,
    headers: dict[str, str] | None = None,
    wait_s: float = 0.0,
    method: str | None = None,
) -> Any:
    """A pop-group call sent on to the owner at `url` (`call` names it for the metric), and its
    JSON answer; an error answer is raised as the owner's problem, with its Retry-After. The
    method is GET without a body, else POST, unless given."""
    metrics.FORWARDED.labels(call).inc()
    method = method or ("GET" if body is None else "POST")
    answer = await send(node, method, url, path, body, headers, wait_s)
    try:
        data = answer.json()
    except ValueError:  # not kpd's answer: a proxy's page, a bare "Internal Server Error"
        data = None
    if answer.status_code == 200 and isinstance(data, dict):
        return data
    problem = data if isinstance(data, dict) else {}
    raise Problem(
        502 if answer.status_code == 200 else answer.status_code,
        str(problem.get("code", "forward_failed")),
        f"sidecar at {url}: {problem.get('detail', answer.text[:200])}",
        headers={k: v for k, v in answer.headers.items() if k == "retry-after"} or None,
        **{k: v for k, v in problem.items() if k not in _PROBLEM_FIELDS},  # per-item results
    )


def segment(name: str) -> str:
    """A name as one URL path segment: `/`, `..` and the like cannot reach another route."""
    quoted = quote(name, safe="")
    return quoted.replace(".", "%2E") if quoted in (".", "..") else quoted


def relayed(answer: Answer) -> Response:
    """The owner's answer, passed on as it came (status, body, and when to retry)."""
    headers = {k: v for k, v in answer.headers.items() if k in ("content-type", "retry-after")}
    return Response(answer.content, status_code=answer.status_code, headers=headers)
