"""The ring of the group's members: who watches whom, keeps a standby of its shards, and takes
them over early while it seems dead (`cluster.successor`)."""

from __future__ import annotations

from dataclasses import dataclass

from cluster.membership import Member


@dataclass(frozen=True)
class Ring:
    """The members in ring order, each with the address of its guardian, worked out once per
    view of the group and replaced whole, so that readers in other threads never see one view's
    members with another's guardians."""

    members: tuple[Member, ...] = ()
    guardians: tuple[str | None, ...] = ()

    @classmethod
    def of(cls, members: list[Member]) -> Ring:
        ring = ring_order(members)
        return cls(tuple(ring), tuple(guardian(ring, i) for i in range(len(ring))))

    def guardians_by_url(self) -> dict[str, str]:
        """Each member's guardian, by the member's address (a member alone has none)."""
        pairs = zip(self.members, self.guardians, strict=True)
        return {member.url: watcher for member, watcher in pairs if watcher is not None}

    def watched(self, url: str) -> list[Member]:
        """The members the one at `url` is the guardian of."""
        pairs = zip(self.members, self.guardians, strict=True)
        return [member for member, watcher in pairs if member.url != url and watcher == url]


def ring_order(members: list[Member]) -> list[Member]:
    """Every sidecar's first worker, then every sidecar's second, and so on, so that the next
    worker is one of another sidecar wherever the counts allow. Ordered by member id alone, a
    sidecar's workers came one after the other (a member id starts with its client id, which
    starts with the worker's address): its first worker was watched by its second, and when the
    whole sidecar died nobody took the first one's shards early (they waited for the group's
    session timeout)."""
    return sorted(members, key=lambda m: (m.index, m.home, m.member_id))


def guardian(ring: list[Member], i: int) -> str | None:
    """The address of the member that watches `ring[i]`: the first one after it in the ring (the
    last one's: the first) that runs in another sidecar, so that a sidecar that dies whole is
    taken over early; in a group of one sidecar, the next member. With sidecars of unequal worker
    counts, the ring puts some workers of a larger sidecar side by side, and then one worker
    elsewhere watches several (2 workers and 1: the lone worker watches both, where the ring's
    neighbour alone left one of them to the group's session timeout)."""
    after = [ring[(i + step) % len(ring)] for step in range(1, len(ring))]
    elsewhere = [member for member in after if member.home != ring[i].home]
    watcher = (elsewhere or after)[:1]
    return watcher[0].url if watcher else None
