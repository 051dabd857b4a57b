"""A pop group's stats across shards: the figures of the shards led here, and of every owner
elsewhere, added up per topic. A forwarded call is answered from local shards only."""

from __future__ import annotations

import asyncio
from typing import Any

from cluster.routing.forwarding import forward, segment
from cluster.routing.node import RoutingNode
from foundation.problem import leadership_moving


async def merged_group_stats(node: RoutingNode, group: str, local: bool) -> dict[str, Any]:
    services = {shard: node.pop_service(shard) for shard in range(node.shard_map.shards)}
    parts = list(
        await asyncio.gather(
            *(asyncio.to_thread(s.stats, group) for s in services.values() if s is not None)
        )
    )
    if not local:
        owners = node.owners()
        # Stats with a shard left out would read as lower figures: say it is moving instead.
        unled = [
            shard
            for shard, service in services.items()
            if service is None and owners.get(shard, node.url) == node.url
        ]
        if unled:
            raise leadership_moving("no_leader", f"no sidecar leads shards {unled} now")
        # Only the owners of shards not led here: a dead owner whose shards this worker took
        # over early is still named by the group for seconds (its session), and asking it
        # failed every stats call until then. By the group's view, not `routes`: a guardian
        # that has not taken a dead owner's shards yet would answer without them, too low.
        urls = {owners[s] for s, service in services.items() if service is None} - {node.url}
        path = f"/v1/groups/{segment(group)}"
        parts += await asyncio.gather(
            *(forward(node, "stats", url, path, None) for url in sorted(urls))
        )
    return _merge_stats(parts)


def _merge_stats(parts: list[dict[str, Any]]) -> dict[str, Any]:
    topics: dict[str, Any] = {}
    for part in parts:
        for topic, numbers in part.get("topics", {}).items():
            merged = topics.setdefault(
                topic, {"available": 0, "in_flight": 0, "retrying": 0, "partitions": {}}
            )
            for name in ("available", "in_flight", "retrying"):
                merged[name] += numbers[name]
            merged["partitions"].update(numbers["partitions"])
    dead = sum(part.get("dead_lettered", 0) for part in parts)
    return {"topics": topics, "dead_lettered": dead}
