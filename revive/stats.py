"""Live numbers of a pop group, per topic (`GET /v1/groups/{group}`)."""

from __future__ import annotations

from typing import Any

from confluent_kafka.admin import AdminClient

from foundation.kafka_clients import partition_ends
from revive.fetcher import GroupFetcher
from revive.pop_state import PopState


def group_stats(
    fetcher: GroupFetcher | None, state: PopState, group: str, admin: AdminClient, timeout_s: float
) -> dict[str, Any]:
    """Read from an HTTP thread while the service works: approximate by nature."""
    topics: dict[str, Any] = {}
    if fetcher is None:
        return topics
    for topic in sorted(fetcher.topics - {fetcher.retry_topic}):
        in_flight = 0  # leased now, originals and retry copies
        for (g, lane, _), ledger in list(state.ledgers.items()):
            if g == group and lane in (topic, f"{fetcher.retry_topic}/{topic}"):
                in_flight += ledger.in_flight()
        committed = fetcher.consumer.committed(
            [tp for tp in fetcher.assignment if tp.topic == topic], timeout=timeout_s
        )
        ends = partition_ends(admin, committed, timeout_s)
        partitions = {}
        for tp in committed:
            done = max(tp.offset, 0)
            lag = ends[(tp.topic, tp.partition)] - done
            partitions[str(tp.partition)] = {"committed": tp.offset, "lag": lag}
        topics[topic] = {
            "available": fetcher.available(topic, retries=False),
            "in_flight": in_flight,
            "retrying": fetcher.available(topic, retries=True),  # copies waiting for a pop
            "partitions": partitions,
        }
    return {"topics": topics, "dead_lettered": state.dead_lettered.get(group, 0)}
