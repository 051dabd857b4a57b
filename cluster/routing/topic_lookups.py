"""What the API asks of the broker about a topic, kept off the event loop.

The topic cache answers a topic seen before from memory; one not known yet is asked of the
broker, for up to the Kafka timeout (again every 2 s for a topic that does not exist yet). That
request runs in a thread: the event loop must stay free to answer calls, peers' health probes
among them (`cluster.routing.forwarding`).
"""

from __future__ import annotations

import asyncio

from cluster.routing.node import RoutingNode


async def topic_exists(node: RoutingNode, topic: str) -> bool:
    return node.topic_cache.known(topic) or await asyncio.to_thread(node.topic_cache.exists, topic)


async def partition_count(node: RoutingNode, topic: str) -> int:
    """How many partitions `topic` has (0 if it does not exist)."""
    if node.topic_cache.known(topic):
        return node.partitions(topic)
    return await asyncio.to_thread(node.partitions, topic)
