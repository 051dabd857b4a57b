"""Who leads each shard, as the group says: refreshed in the background, read without waiting.

Calls for a shard this worker does not lead go to its leader's address, taken from the group's
member list (each member's client id carries its HTTP address).

The member list comes from an admin request to the group's coordinator, and librdkafka aborts the
whole process when such a request times out inside it while the coordinator is away and the
coordinator then returns (librdkafka issue #4605, open). The sidecars of
`tests/integration/test_outages.py` crashed that way on about half of the broker restarts (a
sidecar that crashes in native code now fails its test: `tests/conftest.py`). An ad hoc probe,
with requests timing out in 10 s outages, crashed too when the admin client was renewed after
each failure or made anew for each request (BENCHMARKS.md, 2026-11-26 17:03). So the request gets
a timeout librdkafka never reaches, and this side waits for its answer a bounded time per round,
asking again only once it is answered: while Kafka is away one request stays pending, answered
when Kafka returns. The admin client is the owners' own, so nothing else waits behind it.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import structlog
from confluent_kafka.admin import AdminClient

from foundation.periodic import PeriodicThread
from sidecar.membership import Member, Membership

log = structlog.get_logger(__name__)

REFRESH_S = 1.0
# librdkafka's own timeout of the member-list request: never reached but in an outage this long.
DESCRIBE_TIMEOUT_S = 3600.0


class Owners(PeriodicThread):
    def __init__(self, membership: Membership, admin: AdminClient, timeout_s: float) -> None:
        super().__init__("owners", REFRESH_S, join_s=timeout_s + 1)
        self._membership, self._admin, self._timeout_s = membership, admin, timeout_s
        self.by_shard: dict[int, str] = {}  # replaced whole, so readers never see it half-made
        self.members: list[Member] = []
        self._asked: Future[Any] | None = None  # the member-list request not answered yet

    def tick(self) -> None:
        if self._asked is None:
            self._asked = self._membership.describe(self._admin, DESCRIBE_TIMEOUT_S)
        try:
            description = self._asked.result(timeout=self._timeout_s)
        except Exception as error:  # Kafka away: keep the last answer, /readyz says why
            log.debug("cannot list shard owners", error=repr(error))
            if self._asked.done():  # failed: ask again next round; else it is still pending
                self._asked = None
            return
        self._asked = None
        members = self._membership.members(description)
        self.by_shard = {s: m.url for m in members for s in m.shards}
        self.members = sorted(members, key=lambda m: m.member_id)

    def predecessor(self, url: str) -> Member | None:
        """The member before the one at `url` in the ring of members ordered by id (the first
        one's is the last): the member it watches and would take shards over from next."""
        members = self.members
        mine = [i for i, m in enumerate(members) if m.url == url]
        if not mine or len(members) < 2:
            return None
        return members[mine[0] - 1]
