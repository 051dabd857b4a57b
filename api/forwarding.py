"""Calls sent on to the sidecar (or worker) that owns a shard, and how a peer's call is told apart.

A call a peer forwarded carries `x-kpd-forwarded` (the sender's node id): it is answered from this
worker's own shards and state only, so a call is forwarded at most once, never in a loop.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
from fastapi import Request, Response

from api.node import Node
from api.problems import Problem, leadership_moving
from revive import metrics

FORWARDED = "x-kpd-forwarded"
# An owner whose host does not answer a connect (gone, cut off) fails the call after this long, as
# a refused one does at once; a connect within a deployment takes milliseconds.
CONNECT_TIMEOUT_S = 2.0
# A live owner answers within this long beyond the wait a call asks of it (a long poll's, a
# schedule's index write). A paused owner (SIGSTOP, a frozen VM) or one cut off behind an open
# connection still takes the call and never answers: a pop forwarded to one was held for 60 s,
# then failed, while the asking worker's own lanes had records.
ANSWER_S = 5.0


def is_forwarded(request: Request) -> bool:
    """A peer forwarded this call: answer from local shards only."""
    return FORWARDED in request.headers


async def send(
    node: Node,
    method: str,
    url: str,
    path: str,
    body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    wait_s: float = 0.0,
) -> httpx.Response:
    """Send a call to the sidecar at `url` as a forwarded one (with the API token when one is
    set), which may wait `wait_s` there before it answers; an owner that cannot be reached, or
    does not answer in time, reads as leadership moving (503, retry soon)."""
    sent = {FORWARDED: node.settings.node_id, **(headers or {})}
    if node.settings.api_token is not None:
        sent["authorization"] = f"Bearer {node.settings.api_token.get_secret_value()}"
    try:
        return await node.http.request(
            method, f"{url}{path}", json=body, headers=sent,
            timeout=httpx.Timeout(wait_s + ANSWER_S, connect=CONNECT_TIMEOUT_S),
        )  # fmt: skip
    except httpx.HTTPError as error:
        # Refused, or no answer in time: nothing there answers, so its shards' next calls go to
        # the member that takes them over (its guardian takes a silent member's shards too).
        if isinstance(error, httpx.ConnectError | httpx.TimeoutException):
            node.unreachable(url)
        raise leadership_moving("leader_unreachable", f"sidecar at {url}: {error}") from None


async def forward(
    node: Node,
    call: str,
    url: str,
    path: str,
    body: dict[str, Any] | None,
    headers: dict[str, str] | None = None,
    wait_s: float = 0.0,
) -> Any:
    """A pop-group call sent on to the owner at `url` (`call` names it for the metric), and its
    JSON answer; an error answer is raised as the owner's problem, with its Retry-After."""
    metrics.FORWARDED.labels(call).inc()
    method = "GET" if body is None else "POST"
    answer = await send(node, method, url, path, body, headers, wait_s)
    if answer.status_code != 200:
        problem = answer.json() if answer.content else {}
        raise Problem(
            answer.status_code, str(problem.get("code", "forward_failed")),
            f"sidecar at {url}: {problem.get('detail', answer.text[:200])}",
            headers={k: v for k, v in answer.headers.items() if k == "retry-after"} or None,
        )  # fmt: skip
    return answer.json()


def segment(name: str) -> str:
    """A name as one URL path segment: `/`, `..` and the like cannot reach another route."""
    quoted = quote(name, safe="")
    return quoted.replace(".", "%2E") if quoted in (".", "..") else quoted


def relayed(answer: httpx.Response) -> Response:
    """The owner's answer, passed on as it came (status, body, and when to retry)."""
    headers = {k: v for k, v in answer.headers.items() if k in ("content-type", "retry-after")}
    return Response(answer.content, status_code=answer.status_code, headers=headers)
