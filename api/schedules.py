"""`GET` and `DELETE /v1/schedules/{id}`: read a schedule, cancel it.

Reads come from this node's RocksDB index (a follower's lags the leader by milliseconds). A cancel
is a `kpd-cancel` record on the buffer topic, like a Kafka-native cancel; the call then waits
until the index shows the outcome, because only the leader can tell whether the cancel beat the
delivery.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Path, Response
from pydantic import BaseModel

from api.deps import get_sidecar, require_token
from api.problems import Problem
from delay_service.headers import CANCEL
from delay_service.schedules import Schedule, State
from sidecar.process import Sidecar

router = APIRouter(
    prefix="/v1/schedules", tags=["schedules"], dependencies=[Depends(require_token)]
)

ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
CANCEL_WAIT_S = 10.0
POLL_S = 0.005

ScheduleId = Annotated[str, Path(pattern=ID_PATTERN)]


class ScheduleOut(BaseModel):
    id: str
    state: Literal["scheduled", "delivered", "cancelled"]
    target: str
    deliver_at_ms: int


def _found(sidecar: Sidecar, schedule_id: str) -> Schedule:
    schedule = sidecar.schedules.get(schedule_id)
    if schedule is None:
        raise Problem(404, "schedule_not_found", f"no schedule with id {schedule_id!r}")
    return schedule


@router.get("/{schedule_id}", response_model=ScheduleOut)
def get_schedule(
    schedule_id: ScheduleId, sidecar: Annotated[Sidecar, Depends(get_sidecar)]
) -> ScheduleOut:
    s = _found(sidecar, schedule_id)
    return ScheduleOut(id=schedule_id, state=s.state.value, target=s.target, deliver_at_ms=s.due_ms)


@router.delete("/{schedule_id}", status_code=204, response_class=Response)
async def cancel_schedule(
    schedule_id: ScheduleId, sidecar: Annotated[Sidecar, Depends(get_sidecar)]
) -> Response:
    schedule = _found(sidecar, schedule_id)
    if schedule.state is State.SCHEDULED:
        await sidecar.api_producer.produce(
            sidecar.settings.buffer_topic,
            None,
            schedule_id.encode(),
            [(CANCEL, schedule_id.encode())],
        )
        schedule = await _settled(sidecar, schedule_id)
    if schedule.state is State.DELIVERED:
        raise Problem(
            409,
            "already_delivered",
            f"schedule {schedule_id!r} was delivered at {schedule.at_ms}",
            delivered_at_ms=schedule.at_ms,
        )
    return Response(status_code=204)


async def wait_for_schedule(
    sidecar: Sidecar, schedule_id: str, done: Callable[[Schedule | None], bool], timeout_s: float
) -> Schedule | None:
    """Poll this node's index until `done(schedule)`; the last state seen when time runs out."""
    deadline = time.monotonic() + timeout_s
    while True:
        schedule = sidecar.schedules.get(schedule_id)
        if done(schedule) or time.monotonic() > deadline:
            return schedule
        await asyncio.sleep(POLL_S)


async def _settled(sidecar: Sidecar, schedule_id: str) -> Schedule:
    """Wait until the leader has processed the cancel (or delivered first)."""
    schedule = await wait_for_schedule(
        sidecar,
        schedule_id,
        lambda s: s is not None and s.state is not State.SCHEDULED,
        CANCEL_WAIT_S,
    )
    if schedule is None or schedule.state is State.SCHEDULED:
        raise Problem(
            503,
            "cancel_pending",
            "the cancel is queued on the buffer topic but no "
            "leader has applied it yet; it will apply when one does",
            id=schedule_id,
        )
    return schedule
