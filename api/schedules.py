"""`GET` and `DELETE /v1/schedules/{id}`: read a schedule, cancel it.

Reads come from a RocksDB index that follows the schedule's shard (a follower's lags the leader
by milliseconds). A worker's index follows the shards it leads and those its standby keeps
(every other shard by default, or those it would take over next), so a call for a shard not
kept here is forwarded to that shard's owner (`owner_of`); one whose role or standby here is
starting waits for it to catch up. An id a follower's index does not have is asked of the
shard's owner before the answer is 404: a schedule written a moment ago may not have reached the
follower yet. A cancel is a `kpd-cancel` record on the buffer topic, like a Kafka-native cancel;
the call then waits until the index shows the outcome, because only the leader can tell whether
the cancel beat the delivery.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Path, Request, Response
from pydantic import BaseModel

from api.deps import get_node
from api.node import Node
from api.openapi import GUARDED, problems
from cluster.routing.availability import until
from cluster.routing.forwarding import is_forwarded, relayed, segment, send
from cluster.routing.topic_lookups import partition_count
from delay_service import metrics
from delay_service.headers import CANCEL
from delay_service.schedules import Freshness, Schedule, State
from foundation.problem import Problem, leadership_moving
from foundation.store import NotHeld

router = APIRouter(prefix="/v1/schedules", tags=["schedules"], responses=problems(*GUARDED))

ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
CANCEL_WAIT_S = 10.0
INDEX_WAIT_S = 5.0  # for the index of a shard this worker starts to keep (see `freshness_here`)
POLL_S = 0.005

ScheduleId = Annotated[str, Path(pattern=ID_PATTERN)]


class ScheduleOut(BaseModel):
    id: str
    state: Literal["scheduled", "delivered", "cancelled"]
    target: str
    deliver_at_ms: int


async def freshness_here(node: Node, shard: int) -> Freshness:
    """How well this worker's index follows `shard`, once it no longer catches up (a role or
    standby starting to keep it) or `INDEX_WAIT_S` has passed."""
    deadline = time.monotonic() + INDEX_WAIT_S
    freshness = node.freshness(shard)
    while freshness is Freshness.CATCHING_UP and time.monotonic() < deadline:
        await asyncio.sleep(POLL_S)
        freshness = node.freshness(shard)
    return freshness


async def owner_of(node: Node, schedule_id: str, forwarded: bool) -> str | None:
    """Where to answer about `schedule_id`: None (here) when this worker's index follows its
    shard, else the address of the shard's owner. Answering from an index that does not follow
    the shard could answer with a stale state, so with no other owner known, or a call the
    sender forwarded here as to the owner, the call is refused for a moment."""
    shard = node.shard_map.of_key(schedule_id)
    if await freshness_here(node, shard) is Freshness.CURRENT:
        return None
    owner = node.routes().get(shard)
    if forwarded or owner is None or owner == node.url:
        raise leadership_moving("no_leader", f"no sidecar follows the shard of {schedule_id!r} now")
    return owner


def owner_elsewhere(node: Node, shard: int) -> str | None:
    """The sidecar to send a new schedule of `shard` to: the owner, when this worker's index
    does not keep the shard (nor is about to). None when it does, or no other owner is known:
    the schedule is written here then, and ingest applies it once a leader runs."""
    if node.freshness(shard) is not Freshness.ELSEWHERE:
        return None
    owner = node.routes().get(shard)
    return None if owner == node.url else owner


def schedule_here(node: Node, schedule_id: str) -> Schedule | None:
    """The id's schedule as this worker's index has it; None also where no role here holds its
    shard's store (let go a moment ago, or not taken yet)."""
    try:
        return node.schedules.find(schedule_id)
    except NotHeld:
        return None


def _found(node: Node, schedule_id: str) -> Schedule | None:
    try:
        return node.schedules.find(schedule_id)
    except NotHeld:  # the shard moved between the look at its freshness and this read
        raise leadership_moving("no_leader", f"the shard of {schedule_id!r} is moving") from None


async def _here_or_owner(node: Node, schedule_id: str, request: Request) -> Schedule | str:
    """The id's schedule from this worker's index, or the address of the sidecar to ask: the
    shard's owner where this index does not follow the shard, or where it misses the id (a
    follower's index lags the leader's by milliseconds, so a schedule just written may not be
    here yet, and only the owner can say there is none). Raises 404 where this answer stands."""
    forwarded = is_forwarded(request)
    owner = await owner_of(node, schedule_id, forwarded)
    if owner is not None:
        return owner
    schedule = _found(node, schedule_id)
    if schedule is not None:
        return schedule
    owner = None if forwarded else node.routes().get(node.shard_map.of_key(schedule_id))
    if owner is None or owner == node.url:
        raise Problem(404, "schedule_not_found", f"no schedule with id {schedule_id!r}")
    return owner


async def _relay(
    node: Node, call: str, method: str, owner: str, schedule_id: str, wait_s: float
) -> Response:
    """The owner's answer about `schedule_id`, which it may take `wait_s` to find."""
    metrics.FORWARDED.labels(call).inc()
    path = f"/v1/schedules/{segment(schedule_id)}"
    return relayed(await send(node, method, owner, path, wait_s=wait_s))


@router.get("/{schedule_id}", response_model=ScheduleOut, responses=problems(503))
async def get_schedule(
    schedule_id: ScheduleId, request: Request, node: Annotated[Node, Depends(get_node)]
) -> ScheduleOut | Response:
    s = await _here_or_owner(node, schedule_id, request)
    if isinstance(s, str):
        return await _relay(node, "get", "GET", s, schedule_id, INDEX_WAIT_S)
    return ScheduleOut(id=schedule_id, state=s.state.value, target=s.target, deliver_at_ms=s.due_ms)


@router.delete(
    "/{schedule_id}", status_code=204, response_class=Response, responses=problems(409, 503)
)
async def cancel_schedule(
    schedule_id: ScheduleId, request: Request, node: Annotated[Node, Depends(get_node)]
) -> Response:
    schedule = await _here_or_owner(node, schedule_id, request)
    if isinstance(schedule, str):
        wait_s = INDEX_WAIT_S + CANCEL_WAIT_S
        return await _relay(node, "cancel", "DELETE", schedule, schedule_id, wait_s)
    if schedule.state is State.SCHEDULED:
        await node.api_producer.produce(
            node.settings.buffer_topic,
            None,
            schedule_id.encode(),
            [(CANCEL, schedule_id.encode())],
            partition=await buffer_partition(node, schedule_id),
        )
        schedule = await _settled(node, schedule_id)
    if schedule.state is State.DELIVERED:
        raise Problem(
            409,
            "already_delivered",
            f"schedule {schedule_id!r} was delivered at {schedule.at_ms}",
            delivered_at_ms=schedule.at_ms,
        )
    return Response(status_code=204)


async def buffer_partition(node: Node, schedule_id: str) -> int | None:
    """A buffer partition the shard of `schedule_id` reads, so the record needs no re-keying
    (None: let the partitioner choose; the delay service re-keys it)."""
    buffer = node.settings.buffer_topic
    count = await partition_count(node, buffer)
    if not count:
        return None
    shards = node.shard_map
    mine = shards.partitions(shards.of_key(schedule_id), count)
    return mine[0] if mine else None


async def wait_for_schedule(
    node: Node, schedule_id: str, done: Callable[[Schedule | None], bool], timeout_s: float
) -> Schedule | None:
    """Look at this node's index until `done(schedule)`, again at each index write (and every
    `POLL_S` besides); the last state seen when time runs out."""
    deadline = time.monotonic() + timeout_s
    with node.index_writes.waiting() as written:
        while True:
            written.clear()  # before the look: a write after it wakes the wait below
            schedule = schedule_here(node, schedule_id)
            left = deadline - time.monotonic()
            if done(schedule) or left < 0:
                return schedule
            await until(written.wait(), min(POLL_S, left))


async def _settled(node: Node, schedule_id: str) -> Schedule:
    """Wait until the leader has processed the cancel (or delivered first)."""
    schedule = await wait_for_schedule(
        node,
        schedule_id,
        lambda s: s is not None and s.state is not State.SCHEDULED,
        CANCEL_WAIT_S,
    )
    if schedule is None or schedule.state is State.SCHEDULED:
        # Only happens while no leader runs; a repeated DELETE is harmless (one more cancel).
        raise leadership_moving(
            "cancel_pending",
            "the cancel is queued on the buffer topic but no "
            "leader has applied it yet; it will apply when one does",
            id=schedule_id,
        )
    return schedule
