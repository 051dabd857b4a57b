"""Who leads each shard, as the group says: refreshed in the background, read without waiting.

Calls for a shard this worker does not lead go to its leader's address, taken from the group's
member list (each member's client id carries its HTTP address).

The member list comes from an admin request to the group's coordinator, and librdkafka aborts the
whole process when such a request times out inside it while the coordinator is away and the
coordinator then returns (librdkafka issue #4605, open). The sidecars of
`tests/integration/test_outages.py` crashed that way on about half of the broker restarts (a
sidecar that crashes in native code now fails its test: `tests/conftest.py`). An ad hoc probe,
with requests timing out in 10 s outages, crashed too when the admin client was renewed after
each failure or made anew for each request. So a request gets
a timeout librdkafka never reaches, and this side waits for answers a bounded time per round.

Such a request can also stay pending after Kafka is back, and so can later ones on the same
client: librdkafka's debug log showed them waiting in its coordinator lookup with the broker up
(its pull request #3847, open, describes such requests). With one request at a time a sidecar
could route by a view minutes old after a broker restart, answering `no_leader` for a shard
another sidecar led. So a request pending `REASK_AFTER_S`
is asked again beside it on a fresh admin client, with up to `MAX_CLIENTS` clients holding a
request (a client is let go only once none of its requests is pending), and the newest answer
counts. A view older than `STALE_AFTER_S` makes the worker unready; one unready that way while a
fresh client reaches Kafka restarts (`sidecar.self_heal`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any

import structlog
from confluent_kafka.admin import AdminClient

from cluster.membership import Member, Membership
from cluster.ring import Ring
from foundation.metrics import LEADERLESS, OWNERS_VIEW_AGE
from foundation.periodic import PeriodicThread

log = structlog.get_logger(__name__)

REFRESH_S = 1.0
# librdkafka's own timeout of the member-list request: never reached but in an outage this long.
DESCRIBE_TIMEOUT_S = 3600.0
REASK_AFTER_S = 4.0  # a request pending this long is asked again beside it, on a fresh client
MAX_CLIENTS = 3  # admin clients with a request pending, at most (an outage keeps them all)
STALE_AFTER_S = 10.0  # a view older than this leaves the worker unready
# Views with no shard led for this long leave the worker unready: in broker restarts a few seconds
# apart the group may never finish a rebalance, and nothing is led. Longer than a rebalance
# after a member's session timeout.
LEADERLESS_AFTER_S = 15.0
# A worker in the group this long whose fresh views still do not show it in a settled group is
# unready, and restarts while a fresh client reaches Kafka: after a paused broker comes back, a
# group client may never rejoin (no assignment, no error). Longer than a join: a joining member
# is shown once the rebalance it began
# completes, which waits for every member the group has to rejoin or to miss its session (a dead
# one), so the bound is at least two sessions.
ABSENT_AFTER_S = 10.0
# A member whose address refused a call this recently is taken for dead: calls for its shards go
# to its guardian, which takes them over early (`cluster.successor`); the group names it until
# its session ends. A call after that asks it again (and a refusal marks it again).
REFUSED_FOR_S = 5.0


class Owners(PeriodicThread):
    def __init__(
        self,
        membership: Membership,
        new_admin: Callable[[], AdminClient],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__("owners", REFRESH_S)
        self._membership, self._new_admin, self._clock = membership, new_admin, clock
        # The view in use: each shard's leader, and the members in ring order. Replaced whole, in
        # one assignment, so readers never see one view's leaders with another's ring.
        self._view: tuple[dict[int, str], Ring] = ({}, Ring())
        self._refused: dict[str, float] = {}  # address -> when a call to it was last refused
        self.stable = False  # the view in use shows the group between rebalances
        self._admin: AdminClient | None = None  # the client new requests go to
        # Requests not answered yet -> when asked, and the client they wait in.
        self._pending: dict[Future[Any], tuple[float, AdminClient]] = {}
        self._asked_at = float("-inf")  # when the request of the view in use was asked
        self._viewed_at = clock()  # when that view came (before the first: the start)
        self._led_at = self._viewed_at  # when a view last showed a shard led (or the start)
        self._listed_at = self._viewed_at  # when a stable view last listed this worker
        self.on_change: Callable[[], None] = lambda: None  # the view's owners or ring changed

    @property
    def by_shard(self) -> dict[int, str]:
        return self._view[0]

    @property
    def ring(self) -> Ring:
        return self._view[1]

    def tick(self) -> None:
        self._ask()
        # A round waits for an answer no longer than its period: the next one may ask again.
        done, _ = wait(self._pending, timeout=REFRESH_S, return_when=FIRST_COMPLETED)
        for future in sorted(done, key=lambda f: self._pending[f][0]):  # the newest wins
            asked_at, _ = self._pending.pop(future)
            error = future.exception()
            if error is not None:  # Kafka away: keep the last view, /readyz says why
                log.debug("cannot list shard owners", error=repr(error))
            elif asked_at > self._asked_at:
                description = future.result()
                stable = self._membership.stable(description)
                self._show(self._membership.members(description), stable, asked_at)
        OWNERS_VIEW_AGE.set(self.stale_s())
        LEADERLESS.set(self.leaderless_s())

    def stale_s(self) -> float:
        """How old the view in use is (since the worker started, before the first one)."""
        return self._clock() - self._viewed_at

    def leaderless_s(self) -> float:
        """How long the views have shown no shard with a leader (0 while the one in use shows
        one; from the start, before any did)."""
        return 0.0 if self.by_shard else self._clock() - self._led_at

    def absent_s(self) -> float:
        """How long the views have not shown this worker in a settled group (since the start,
        before any did)."""
        return self._clock() - self._listed_at

    def refused(self, url: str) -> None:
        """A call to the member at `url` was refused, or went unanswered (its connect, or the
        answer past the call's bound): nothing there answers (killed, crashed, paused, its host
        gone or cut off)."""
        now = self._clock()
        self._refused = {**self._refused_since(now), url: now}

    def routes(self) -> dict[int, str]:
        """Where calls for each shard go: to its leader as the group names it, except the shards
        of a member whose address refused a call within `REFUSED_FOR_S`, which go to the
        member's guardian. A killed owner stays named until its session ends (6 s at least),
        while its guardian has taken its shards over within about a second: a third member's
        acks and pops for them failed until the group noticed."""
        dead = self._refused_since(self._clock())
        by_shard, ring = self._view
        if not dead:
            return by_shard
        detours = {
            url: guardian
            for url, guardian in ring.guardians_by_url().items()
            if url in dead and guardian not in dead
        }
        return {shard: detours.get(url, url) for shard, url in by_shard.items()}

    def _refused_since(self, now: float) -> dict[str, float]:
        """The addresses that refused a call within `REFUSED_FOR_S` of `now`, and when."""
        return {url: at for url, at in self._refused.items() if now - at < REFUSED_FOR_S}

    def settled(self, url: str, owned: frozenset[int], shards: int) -> bool:
        """Does the view in use show all `shards` led, and the member at `url` in the group
        holding `owned`? Else a rebalance that may move shards to it is under way: a cooperative
        one gives a joining member nothing in its first round, and the shards the others let go
        in that round only in its second. (A group still rebalancing describes its members with
        no assignment at all, and one preparing a rebalance with what they held before it: the
        joining member with nothing while the others hold every shard, which let a worker count
        as started before its shards came, in a run of `test_workers.py`.)"""
        by_shard, ring = self._view
        mine = [m.shards for m in ring.members if m.url == url]
        return self.stable and mine == [owned] and len(by_shard) == shards

    def _show(self, members: list[Member], stable: bool, asked_at: float) -> None:
        view = ({s: m.url for m in members for s in m.shards}, Ring.of(members))
        changed, self._view = view != self._view, view
        self.stable = stable
        self._asked_at, self._viewed_at = asked_at, self._clock()
        if self.by_shard:
            self._led_at = self._viewed_at
        # A member counts as in the group once a rebalance has completed with it: a client
        # stuck between joining and its assignment would be listed by an unsettled group.
        if stable and any(member.url == self._membership.url for member in members):
            self._listed_at = self._viewed_at
        if changed:
            self.on_change()

    def _ask(self) -> None:
        """Ask for the members unless a request is pending; one pending `REASK_AFTER_S` may be
        stuck in its client, so ask on a fresh one (while fewer than `MAX_CLIENTS` wait)."""
        now = self._clock()
        waiting = {f: v for f, v in self._pending.items() if not f.done()}  # done: read this round
        mine = [asked_at for asked_at, admin in waiting.values() if admin is self._admin]
        if self._admin is None:
            self._admin = self._new_admin()
        elif mine:
            clients = {id(admin) for _, admin in waiting.values()}
            if now - max(mine) < REASK_AFTER_S or len(clients) >= MAX_CLIENTS:
                return
            pending_s = round(now - max(mine), 1)
            log.info("shard owners request pending; asking on a fresh client", s=pending_s)
            self._admin = self._new_admin()
        future = self._membership.describe(self._admin, DESCRIBE_TIMEOUT_S)
        self._pending[future] = (now, self._admin)


def group_reasons(membership: Membership | None, owners: Owners | None) -> list[str]:
    """Why this worker cannot route calls by the group's view now (empty: it can), for /readyz.
    The reasons that start with "shard leaders not known" and "not in the group" are its group
    clients' own: `sidecar.self_heal` restarts the worker on them."""
    not_known = "shard leaders not known yet"  # no assignment seen yet
    if membership is None or owners is None:
        return [not_known]
    reasons = [] if membership.assigned_once else [not_known]
    stale_s = owners.stale_s()
    if stale_s > STALE_AFTER_S:  # calls would go by an old view
        reasons.append(f"shard leaders not known for {stale_s:.0f} s")
    leaderless_s = owners.leaderless_s()
    if leaderless_s > LEADERLESS_AFTER_S:
        reasons.append(f"no shard has had a leader for {leaderless_s:.0f} s")
    absent_s = min(owners.absent_s(), membership.joined_s())
    absent_bound_s = max(ABSENT_AFTER_S, 2 * membership.session_timeout_s)
    if stale_s <= STALE_AFTER_S and absent_s > absent_bound_s:
        reasons.append(f"not in the group for {absent_s:.0f} s")
    return reasons
