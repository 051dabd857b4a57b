"""Acks, nacks, lease changes and rejects across shards: each receipt goes to its shard's owner.

A call's receipts are split by shard: a shard led by this worker settles its own through its pop
service's inbox, the others' go to their owners over HTTP (a peer's forwarded call is settled
from local shards only). The shards answer independently, so a shard that cannot answer now
(its leader moving or restarting) fails only its own receipts: they come back `unavailable`,
with the problem's code and when to try again, beside what the other shards settled (as SQS's
batch calls answer per entry). Only a call no shard answered fails as a whole, with the 503 a
client already retries. Failing every receipt for one shard's sake made a client's retry read
`already_acked` for what had been settled, and a nack's retry could not tell what it had done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from cluster.routing.forwarding import forward, segment
from cluster.routing.node import RoutingNode
from cluster.routing.shard_answers import shard_answer, shard_route
from foundation.problem import Problem
from revive.lanes import source_topic
from revive.receipt import InvalidReceipt, Receipt
from revive.requests import SettleRequest

UNAVAILABLE = "unavailable"
Item = tuple[int, str, Receipt, Any]  # place in the call, receipt text, receipt, argument


async def settle(
    node: RoutingNode, kind: str, group: str, items: list[tuple[str, Any]], local: bool
) -> list[dict[str, Any]]:
    """One result per item, in request order (`kind`: ack, nack, leases or reject)."""
    results: list[dict[str, Any] | None] = [None] * len(items)
    by_shard: dict[int, list[Item]] = {}
    shards: dict[tuple[str, int], int] = {}  # (topic, partition) -> shard: once per lane named
    for i, (text, argument) in enumerate(items):
        try:
            receipt = node.codec.decode(text, group=group)
        except InvalidReceipt as error:
            results[i] = {"receipt": text, "status": "invalid", "detail": error.reason}
            continue
        lane = (receipt.topic, receipt.partition)
        shard = shards.get(lane)
        if shard is None:
            shard = shards[lane] = node.shard_map.of_lane(group, source_topic(lane[0]), lane[1])
        by_shard.setdefault(shard, []).append((i, text, receipt, argument))
    calls = _calls(node, kind, group, by_shard, local)
    answers = await asyncio.gather(*(_answered(call) for _, call in calls))
    if answers and all(isinstance(answer, Problem) for answer in answers):
        raise answers[0]  # type: ignore[misc]  # nothing settled: the whole call is retried
    for (placed, _), answer in zip(calls, answers, strict=True):
        if isinstance(answer, Problem):
            answer = [_unavailable(text, answer) for _, text, _, _ in placed]
        for (i, *_), result in zip(placed, answer, strict=True):
            results[i] = result
    return [result for result in results if result is not None]


def _calls(
    node: RoutingNode, kind: str, group: str, by_shard: dict[int, list[Item]], local: bool
) -> list[tuple[list[Item], Awaitable[list[dict[str, Any]]]]]:
    """Each shard's items and the call that settles them: one per local shard, one per owner
    elsewhere, and a refusal for a shard nobody can settle now."""
    owners = node.routes()
    remote: dict[str, list[Item]] = {}
    calls: list[tuple[list[Item], Awaitable[list[dict[str, Any]]]]] = []
    for shard, shard_items in by_shard.items():
        try:
            route = shard_route(node, shard, local, owners)
        except Problem as moving:
            calls.append((shard_items, _refused(moving)))
            continue
        if isinstance(route, str):
            remote.setdefault(route, []).extend(shard_items)
        else:
            request = SettleRequest(kind, group, [(t, r, a) for _, t, r, a in shard_items])
            calls.append((shard_items, shard_answer(route.settle(request))))
    for url, url_items in remote.items():
        body = _body(kind, [(t, a) for _, t, _, a in url_items])
        answer = forward(node, kind, url, f"/v1/groups/{segment(group)}/{kind}", body)
        calls.append((url_items, _results(answer)))
    return calls


async def _answered(call: Awaitable[list[dict[str, Any]]]) -> list[dict[str, Any]] | Problem:
    """A shard's results, or the server error that says it cannot answer now (a 503 while its
    leader moves, an owner's failure): its items alone fail. A 4xx is the call's."""
    try:
        return await call
    except Problem as problem:
        if problem.status < 500:
            raise
        return problem


async def _refused(problem: Problem) -> list[dict[str, Any]]:
    raise problem


async def _results(answer: Awaitable[Any]) -> list[dict[str, Any]]:
    return list((await answer)["results"])


def _unavailable(text: str, problem: Problem) -> dict[str, Any]:
    result: dict[str, Any] = {"receipt": text, "status": UNAVAILABLE, "code": problem.code}
    result["detail"] = problem.detail
    headers = {name.lower(): value for name, value in (problem.headers or {}).items()}
    retry_after = headers.get("retry-after")
    if retry_after is not None and retry_after.isascii() and retry_after.isdigit():
        result["retry_after_ms"] = int(retry_after) * 1000
    return result


def _body(kind: str, items: list[tuple[str, Any]]) -> dict[str, Any]:
    if kind == "ack":
        return {"receipts": [text for text, _ in items]}
    field = {"nack": "delay_ms", "leases": "invisible_ms", "reject": "reason"}[kind]
    return {"items": [{"receipt": t, **({field: a} if a is not None else {})} for t, a in items]}
