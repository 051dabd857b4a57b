"""Why a worker is not ready (`/readyz`), beyond Kafka, its topics and the group's view
(`cluster.owners.group_reasons`): roles still starting, and sibling workers not ready yet."""

from __future__ import annotations

from cluster.conductor import Conductor
from cluster.membership import Membership
from cluster.owners import Owners
from sidecar.workers import StartedWorkers


def role_reasons(conductor: Conductor | None, membership: Membership | None) -> list[str]:
    """Shards assigned whose roles have not started, and a standby not caught up once."""
    if conductor is None:
        return []
    reasons = []
    starting = {s for s in conductor.led if not conductor.started(s)}
    if membership is not None and not membership.paused:
        # Assigned a moment ago, roles not started yet: without this a sidecar was ready for
        # the ~0.1 s between an assignment and its roles' start.
        starting |= membership.owned - conductor.led
    if starting:
        reasons.append(f"taking over shards {sorted(starting)}")
    if not conductor.standby_caught_up_once():
        reasons.append("state not caught up yet")
    return reasons


def waiting_workers(
    started: StartedWorkers | None,
    group: tuple[Owners | None, Membership | None],
    url: str,
    shards: int,
    ready_here: bool,
) -> int:
    """How many workers of this sidecar have not been ready yet. This one counts once ready in
    a settled group (`Owners.settled`): one counted between the two rounds of the rebalance its
    joining began holds nothing yet, and would let the sidecar say ready before it takes shards
    over."""
    if started is None:
        return 0
    owners, membership = group
    settled = (
        owners is not None
        and membership is not None
        and owners.settled(url, membership.owned, shards)
    )
    return started.not_started(ready_here and settled)
