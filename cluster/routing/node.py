"""What the routing needs of the running worker: its shards' pop services, who leads the others
and how to reach them. The composition root (`sidecar`) provides it; `api.node.Node` adds what
the HTTP routes need besides."""

from __future__ import annotations

from typing import Protocol

from cluster.routing.availability import Availability
from foundation.config import Settings
from foundation.peer_http import PeerHttp
from foundation.shards import ShardMap
from foundation.topics import TopicCache
from revive.receipt import ReceiptCodec
from revive.service import PopService


class RoutingNode(Protocol):
    settings: Settings
    topic_cache: TopicCache
    http: PeerHttp  # forwards calls to the sidecar that owns them
    codec: ReceiptCodec
    availability: Availability  # wakes long polls when records arrive

    @property
    def shard_map(self) -> ShardMap: ...

    @property
    def url(self) -> str:
        """This worker's own address, as the others reach it."""

    def pop_service(self, shard: int) -> PopService | None:
        """The started pop service of `shard` if this worker leads it."""

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
