"""Live numbers of a pop group, per topic (`GET /v1/groups/{group}`)."""

from __future__ import annotations

from typing import Any

from revive.fetcher import GroupFetcher
from revive.pop_state import PopState


def group_stats(
    fetcher: GroupFetcher | None, state: PopState, group: str, timeout_s: float
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
        partitions = {}
        for tp in committed:
            _, high = fetcher.consumer.get_watermark_offsets(tp, timeout=timeout_s)
            done = max(tp.offset, 0)
            partitions[str(tp.partition)] = {"committed": tp.offset, "lag": high - done}
        topics[topic] = {
            "available": fetcher.available(topic, retries=False),
            "in_flight": in_flight,
            "retrying": fetcher.available(topic, retries=True),  # copies waiting for a pop
            "partitions": partitions,
        }
    return {"topics": topics, "dead_lettered": state.dead_lettered.get(group, 0)}
