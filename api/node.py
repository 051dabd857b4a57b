"""What the HTTP API needs from the running node. The composition root (`sidecar`) provides it;
the API never imports that layer, so it depends only on the services below it."""

from __future__ import annotations

from typing import Protocol

from api.availability import Availability
from api.index_writes import IndexWrites
from delay_service.schedules import Freshness, ScheduleIndex
from foundation.async_producer import AsyncProducer
from foundation.config import Settings
from foundation.peer_http import PeerHttp
from foundation.shards import ShardMap
from foundation.topics import TopicCache
from revive.receipt import ReceiptCodec
from revive.service import PopService


class Node(Protocol):
    settings: Settings
    schedules: ScheduleIndex
    api_producer: AsyncProducer
    topic_cache: TopicCache
    http: PeerHttp  # forwards calls to the sidecar that owns them
    codec: ReceiptCodec
    availability: Availability  # wakes long polls when records arrive
    index_writes: IndexWrites  # wakes calls waiting for the schedule index

    @property
    def shard_map(self) -> ShardMap: ...

    @property
    def url(self) -> str:
        """This worker's own address, as the others reach it."""

    def pop_service(self, shard: int) -> PopService | None:
        """The started pop service of `shard` if this worker leads it."""

    def freshness(self, shard: int) -> Freshness:
        """How well this worker's schedule index follows `shard` now: current (led here, or
        kept by its caught-up standby), catching up (what will keep it is starting), or kept
        elsewhere."""

    def owners(self) -> dict[int, str]:
        """The address of each shard's leader, as the group named it last (refreshed in the
        background)."""

    def routes(self) -> dict[int, str]:
        """Where calls for each shard go: its leader as `owners` says, or, for a leader whose
        address refused a call just now, the member that takes its shards over early."""

    def unreachable(self, url: str) -> None:
        """A call to the sidecar at `url` was refused, or went unanswered (connect or answer)."""

    def partitions(self, topic: str) -> int:
        """How many partitions `topic` has (0 if it does not exist)."""

    def owned_topics(self) -> frozenset[str]:
        """The names of the topics kpd owns (made once: every produce and pop asks)."""

    def not_ready_reasons(self) -> list[str]: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...
