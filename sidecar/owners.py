"""Who leads each shard, as the group says: refreshed in the background, read without waiting.

Calls for a shard this worker does not lead go to its leader's address, taken from the group's
member list (each member's client id carries its HTTP address).
"""

from __future__ import annotations

import structlog
from confluent_kafka.admin import AdminClient

from foundation.periodic import PeriodicThread
from sidecar.membership import Member, Membership

log = structlog.get_logger(__name__)

REFRESH_S = 1.0


class Owners(PeriodicThread):
    def __init__(self, membership: Membership, admin: AdminClient, timeout_s: float) -> None:
        super().__init__("owners", REFRESH_S, join_s=timeout_s + 1)
        self._membership, self._admin, self._timeout_s = membership, admin, timeout_s
        self.by_shard: dict[int, str] = {}  # replaced whole, so readers never see it half-made
        self.members: list[Member] = []

    def tick(self) -> None:
        try:
            members = self._membership.members(self._admin, self._timeout_s)
        except Exception as error:  # Kafka away: keep the last answer, /readyz says why
            log.debug("cannot list shard owners", error=str(error))
            return
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
