"""Pop-group calls across shards: any sidecar answers, from the lanes of every shard's owner.

Each (group, topic, partition) lane belongs to one shard (`foundation.shards`), served by the
worker that leads it. A pop asks the sources of its (group, topic), local shards and remote
owners, until it has `max_messages`: its own shards first, one other owner only when its own
lanes have nothing, and first now and then, so no lane starves (`cluster.routing.pop_turns`). A pop
answers with fewer than `max_messages` rather than forward for the rest, as SQS does. A pop that had
to lease elsewhere because this worker's lanes were empty says so (`Popped.elsewhere`): the API then
asks a client of the shared port to reconnect, so its connection may land on a worker with records.
A source that cannot answer (a shard's role restarting, an owner away) fails only itself: the call
answers what the others leased, and fails only when none leased anything. With nothing anywhere it
parks: a local arrival (`cluster.routing.availability`) or a remote owner's watch (a long poll that
leases nothing) wakes it, so it answers as soon as any lane gets a message. Calls forwarded by a
peer are answered from local shards only. Acks, nacks, lease changes and rejects:
`cluster.routing.settle_router`; a group's stats: `cluster.routing.group_stats`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import orjson

from cluster.routing.availability import until
from cluster.routing.forwarding import forward, segment
from cluster.routing.node import RoutingNode
from cluster.routing.pop_turns import PopTurns
from cluster.routing.shard_answers import ANSWER_TIMEOUT_S, LATE_ASKS_S, busy, shard_answer
from cluster.routing.topic_lookups import partition_count
from foundation.problem import leadership_moving
from revive import metrics
from revive.service import PopService

WATCH = "x-kpd-watch"  # a peer's long poll that only asks "are there records?"
WATCH_S = 20.0  # how long a watch waits at the owner (the longest pop wait)
WATCH_RETRY_S = 1.0  # the next watch of an owner whose watch failed waits out the rest of this
# Records that come while this worker's own clients pop the (group, topic) are theirs for this
# long before a peer's watch is told of them: a parked client here takes one in about a
# millisecond, and a peer told of it would only send a pop too late to find it.
LEFT_FOR_CLIENTS_S = 0.01
Source = PopService | str  # a local shard's service, or a remote owner's URL
# A popped message: rendered by a local shard (`revive.lease`), or decoded from a peer's answer.
Message = orjson.Fragment | dict[str, Any]
LANE_SHARDS_KEPT = 4096  # (group, topic)s whose lanes' shards are remembered: any pop names one


@dataclass(frozen=True)
class Popped:
    messages: list[Message]
    # Leased from another owner because this worker's own lanes of the (group, topic) had none
    # (not on a turn that asks the others first).
    elsewhere: bool
    partial: bool = False  # a source failed: the others were not all asked


class PopRouter:
    def __init__(self, node: RoutingNode) -> None:
        self._node = node
        self.turns = PopTurns()
        self._watches: dict[tuple[str, str, str], asyncio.Task[None]] = {}
        self._failed_watches: dict[tuple[str, str, str], float] = {}  # when each last failed
        # (group, topic, retry topic, their partition counts) -> the shards of their lanes
        self._lane_shards: dict[tuple[str, str, str, int, int], list[int]] = {}

    async def pop(
        self, group: str, topic: str, wanted: int, invisible_ms: int, wait_ms: int, local: bool
    ) -> Popped:
        deadline = time.monotonic() + wait_ms / 1000
        if not local:
            self.turns.client_pop(group, topic)
        told: set[str] = set()  # owners whose watch said they have records
        woken = False  # by an arrival, on this poll's turn (`cluster.routing.availability`)
        while True:
            try:
                sources = await self._sources(group, topic, local)
                popped = await self._collect(group, topic, wanted, invisible_ms, sources, told)
            except BaseException:
                if woken:  # what woke it is still there for the next parked poll
                    self._node.availability.pass_on(group, topic)
                raise
            if woken and (len(popped.messages) >= wanted or popped.partial):
                self._node.availability.pass_on(group, topic)  # more may have come
            left = deadline - time.monotonic()
            if popped.messages or left <= 0:
                return popped
            told, woken = await self._park(group, topic, sources, left)

    async def watch(self, group: str, topic: str, wait_ms: int) -> int:
        """For a peer: wait until local lanes of (group, topic) hold records; how many."""
        sources = await self._sources(group, topic, local=True)
        services = [s for s in sources if isinstance(s, PopService)]
        # A shard reads (group, topic) once it has been asked for it; the shards are asked
        # together (each has its own thread), so they wait out one bound, not one each.
        asked = await asyncio.gather(
            *(
                shard_answer(service.start_reading(group, topic), ANSWER_TIMEOUT_S)
                for service in services
                if not service.reads(group, topic)
            ),
            return_exceptions=True,
        )
        for answer in asked:
            if isinstance(answer, Exception):
                raise answer
        deadline = time.monotonic() + wait_ms / 1000
        with self._node.availability.waiting(group, topic, every=True) as arrived:
            for service in services:
                service.wake()
            while True:
                count = sum(service.available(group, topic) for service in services)
                if count and self.turns.clients_pop_here(group, topic):
                    # This worker's own clients get the first go at what came: the peer is
                    # told only of what they leave.
                    await asyncio.sleep(LEFT_FOR_CLIENTS_S)
                    count = sum(service.available(group, topic) for service in services)
                left = deadline - time.monotonic()
                if count or left <= 0:
                    return count
                arrived.clear()
                await until(arrived.wait(), left)

    async def _sources(self, group: str, topic: str, local: bool) -> list[Source]:
        """Who serves lanes of (group, topic): this worker's shards, then the other owners."""
        node = self._node
        retry = node.settings.group(group).retry_topic or ""
        counts = (await partition_count(node, topic), await partition_count(node, retry))
        shards = self._shards_of_lanes(group, topic, retry, *counts)
        owners = node.routes()
        services: list[Source] = []
        urls: set[str] = set()
        for shard in shards:
            service = node.pop_service(shard)
            if service is not None:
                services.append(service)
            elif not local and shard in owners and owners[shard] != node.url:
                urls.add(owners[shard])
        sources = [*services, *sorted(urls)]
        if not sources:
            raise leadership_moving("no_leader", f"no sidecar serves the lanes of {topic!r} now")
        return sources

    def _shards_of_lanes(
        self, group: str, topic: str, retry: str, count: int, retry_count: int
    ) -> list[int]:
        """The shards of (group, topic)'s lanes and its retry topic's, in order: hashed once per
        (group, topic) and partition counts, not on every pop."""
        shards = self._lane_shards.get((group, topic, retry, count, retry_count))
        if shards is not None:
            return shards
        if len(self._lane_shards) >= LANE_SHARDS_KEPT:
            self._lane_shards.clear()
        of_lane = self._node.shard_map.of_lane
        lanes = [(topic, p) for p in range(count)] + [(retry, p) for p in range(retry_count)]
        shards = sorted({of_lane(group, name, p) for name, p in lanes})
        self._lane_shards[(group, topic, retry, count, retry_count)] = shards
        return shards

    async def _collect(
        self,
        group: str,
        topic: str,
        wanted: int,
        invisible_ms: int,
        sources: list[Source],
        told: set[str],
    ) -> Popped:
        local = [source for source in sources if isinstance(source, PopService)]
        remote = [source for source in sources if isinstance(source, str)]
        found: list[Message] = []
        failed: Exception | None = None  # the first source that could not answer
        asked_here = 0  # local shards asked so far
        elsewhere = False
        # One bound for the round, not one per source: a worker whose shards all hang (their
        # threads blocked on a Kafka call) answered a pop after 30 s per shard.
        ends = time.monotonic() + ANSWER_TIMEOUT_S
        for source in self.turns.order(group, topic, local, remote, told):
            left = wanted - len(found)
            if left <= 0 or (failed is not None and found):
                # What some sources leased is the caller's: failing the call would leave it
                # invisible, to anyone, for its whole lease (a shard's pop role fenced while
                # another shard's had answered: some messages came back only after 30 s, and
                # their acks read "superseded"). So a failure ends the round with what it has.
                break
            try:
                if isinstance(source, PopService):
                    asked_here += 1
                    found += await self._lease_here(source, group, topic, left, invisible_ms, ends)
                elif not found:  # an owner elsewhere is asked only while nothing was found here
                    if time.monotonic() >= ends:
                        raise busy()
                    found += await self._lease_elsewhere(source, group, topic, left, invisible_ms)
                    if found and asked_here == len(local):
                        elsewhere = True
                        break
            except Exception as error:
                # One shard's failure (its role fenced or restarting, its owner away) fails only
                # itself: the other sources are still asked (a pop that asked the failing shard
                # first answered 503 while another shard had records, CI).
                failed = failed or error
        if failed is not None:
            if not found:
                raise failed
            metrics.PARTIAL_POPS.inc()
        return Popped(found, elsewhere, partial=failed is not None)

    @staticmethod
    async def _lease_here(
        service: PopService, group: str, topic: str, wanted: int, invisible_ms: int, ends: float
    ) -> list[Message]:
        """What `service` leases, given until `ends` (the round's bound); past it only a shard
        whose lanes show records is asked, within the round's `LATE_ASKS_S`."""
        known = service.reads(group, topic)
        if known and not service.worth_asking(group, topic):
            return []
        left_s = ends - time.monotonic()
        if left_s <= 0:
            left_s += LATE_ASKS_S if known else 0
        if left_s <= 0:
            raise busy()
        return await shard_answer(service.lease(group, topic, wanted, invisible_ms), left_s)

    async def _lease_elsewhere(
        self, url: str, group: str, topic: str, wanted: int, invisible_ms: int
    ) -> list[Message]:
        body = {"max_messages": wanted, "invisible_ms": invisible_ms, "wait_ms": 0}
        answer = await forward(self._node, "pop", url, pop_path(group, topic), body)
        self.turns.heard(url, group, topic, answer)
        return list(answer["messages"])

    async def _park(
        self, group: str, topic: str, sources: list[Source], left_s: float
    ) -> tuple[set[str], bool]:
        """Until a local lane gets records, or a remote owner says it has some, or `left_s`;
        the owners that said so, and whether an arrival here woke it."""
        services = [s for s in sources if isinstance(s, PopService)]
        # The arrival watch reads the parked poll's partitions from where each fetcher got to
        # (`revive.arrivals`), so what came since the last look wakes its shard.
        with self._node.availability.waiting(group, topic) as arrived:
            if any(service.worth_asking(group, topic) for service in services):
                return set(), False  # arrived since the last look
            here = asyncio.ensure_future(arrived.wait())
            watches = {
                url: self._watch(url, group, topic) for url in sources if isinstance(url, str)
            }
            try:
                await asyncio.wait(
                    [here, *watches.values()], timeout=left_s, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                here.cancel()  # the watches are shared: they run on for the other polls
            woken = arrived.is_set()
        return {url for url, watch in watches.items() if watch.done()}, woken

    def _watch(self, url: str, group: str, topic: str) -> asyncio.Task[None]:
        """The watch of (group, topic) at the owner at `url`: one at a time, shared by every
        poll parked here meanwhile, so a park costs no call of its own. It ends when the owner
        has records its own clients left (`watch`), fails, or its WATCH_S run out."""
        key = (url, group, topic)
        task = self._watches.get(key)
        if task is None:
            failed_at = self._failed_watches.pop(key, None)
            pause_s = 0.0 if failed_at is None else failed_at + WATCH_RETRY_S - time.monotonic()
            watched = self._watched(url, group, topic, pause_s)
            task = self._watches[key] = asyncio.ensure_future(watched)
            task.add_done_callback(lambda done: self._watch_ended(key, done))
        return task

    async def _watched(self, url: str, group: str, topic: str, pause_s: float) -> None:
        if pause_s > 0:
            # The last watch failed: each failed watch ends the parks it served, which ask the
            # owner and park again. An owner that answered pops but not watches was asked
            # thousands of times a second.
            await asyncio.sleep(pause_s)
        body = {"max_messages": 1, "wait_ms": int(WATCH_S * 1000)}
        path = pop_path(group, topic)
        answer = await forward(self._node, "watch", url, path, body, {WATCH: "1"}, wait_s=WATCH_S)
        self.turns.heard(url, group, topic, answer)

    def _watch_ended(self, key: tuple[str, str, str], task: asyncio.Task[None]) -> None:
        """A watch that failed (its owner gone or restarting) ends the parks it served, and the
        next call to that owner tells their callers why: its error is taken here, not left for
        asyncio to log as "never retrieved"."""
        self._watches.pop(key, None)
        if task.cancelled() or task.exception() is None:
            return
        now = time.monotonic()
        self._failed_watches = {
            k: at for k, at in self._failed_watches.items() if now - at < WATCH_RETRY_S
        }
        self._failed_watches[key] = now


def pop_path(group: str, topic: str) -> str:
    """The path of a (group, topic)'s pop at another sidecar, for a pop or a watch forwarded."""
    return f"/v1/groups/{segment(group)}/topics/{segment(topic)}/pop"
