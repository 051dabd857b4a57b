"""What the HTTP API needs from the running node: what the routing needs (`RoutingNode`), and
the delay feature's index and producer. The composition root (`sidecar`) provides it; the API
never imports that layer, so it depends only on the services below it."""

from __future__ import annotations

from typing import Protocol

from api.index_writes import IndexWrites
from cluster.routing.node import RoutingNode
from delay_service.schedules import Freshness, ScheduleIndex
from foundation.async_producer import AsyncProducer


class Node(RoutingNode, Protocol):
    schedules: ScheduleIndex
    api_producer: AsyncProducer
    index_writes: IndexWrites  # wakes calls waiting for the schedule index

    def freshness(self, shard: int) -> Freshness:
        """How well this worker's schedule index follows `shard` now: current (led here, or
        kept by its caught-up standby), catching up (what will keep it is starting), or kept
        elsewhere."""

    def owned_topics(self) -> frozenset[str]:
        """The names of the topics kpd owns (made once: every produce and pop asks)."""

    def not_ready_reasons(self) -> list[str]: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...
