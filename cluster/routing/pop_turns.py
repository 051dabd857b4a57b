"""Which source a pop asks first: this worker's shards, or another owner of the (group, topic).

A pop asks its own shards first: a forwarded pop costs a second HTTP call, and so does every ack
of what it leased. But a lane that no client reaches directly must not starve, whichever sidecar
or worker the clients talk to (RocketMQ 5 clients pop every broker in turn). So one pop in
`REMOTE_FIRST_EVERY` asks the other owners first.

An owner whose own clients pop the (group, topic) needs no such turn: they drain its lanes,
since it asks its own shards first too. Its answers to forwarded pops and watches say so
(`CLIENTS_POP_HERE`: a client popped the (group, topic) there within `CLIENTS_SEEN_S`). For
`CLIENTS_SEEN_S` after such an answer, it is *served*: a pop asks it only on a remote-first
turn, and last, or once its watch says it has records its clients left
(`cluster.routing.pop_router.PopRouter.watch`). Asked on every turn, each message that came there
while this worker's clients waited cost three calls between the workers (the watch's answer, a pop
forwarded too late to find it, a new watch). Once that has passed, a turn asks it first again, and
its answer says whether its clients still come.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from typing import Any, TypeVar

# One pop in this many asks the other owners before this worker's own shards. Rarer means fewer
# forwarded calls while local lanes have records (4 workers, batch 100: 156 forwarded pops instead
# of 572-595); a lane no client reaches directly is still served
# at 1/8 of the pops of each sidecar that clients do reach.
REMOTE_FIRST_EVERY = 8
# How long a client's pop of a (group, topic) counts as its clients still popping it there. Long
# enough to span the gaps between a steady client's pops; short, since a lane whose clients left
# waits that long for its first remote-first turn.
CLIENTS_SEEN_S = 1.0
CLIENTS_POP_HERE = "clients_pop_here"  # the field of an answer to a forwarded pop that says so
L = TypeVar("L")
R = TypeVar("R")


class PopTurns:
    """The turns of this worker's pops, and which owners' clients pop each (group, topic)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._turns: dict[tuple[str, str], int] = {}
        self._client_pops: dict[tuple[str, str], float] = {}  # when a client last popped here
        self._popped_there: dict[tuple[str, str, str], float] = {}  # ... at the owner (url)

    def client_pop(self, group: str, topic: str) -> None:
        """A client, not a peer, popped (group, topic) at this worker."""
        self._client_pops[(group, topic)] = self._clock()

    def clients_pop_here(self, group: str, topic: str) -> bool:
        return self._recent(self._client_pops.get((group, topic)))

    def heard(self, url: str, group: str, topic: str, answer: dict[str, Any]) -> None:
        """The owner at `url` answered a pop forwarded to it: do its clients pop there?"""
        key = (group, topic, url)
        if answer.get(CLIENTS_POP_HERE) is True:
            self._popped_there[key] = self._clock()
        else:
            self._popped_there.pop(key, None)

    def order(
        self,
        group: str,
        topic: str,
        local: Sequence[L],
        remote: Sequence[str],
        told: Collection[str] = (),
    ) -> list[L | str]:
        """The order in which this pop of (group, topic) asks its sources (`visit_order`); the
        owners whose watch said they have records (`told`) count as not served."""
        turn = self._turns[(group, topic)] = self._turns.get((group, topic), -1) + 1
        served = {
            url
            for url in remote
            if url not in told and self._recent(self._popped_there.get((group, topic, url)))
        }
        return visit_order(local, remote, turn, served)

    def _recent(self, at: float | None) -> bool:
        return at is not None and self._clock() - at < CLIENTS_SEEN_S


def visit_order(
    local: Sequence[L], remote: Sequence[R], turn: int, served: Collection[R] = ()
) -> list[L | R]:
    """The order in which pop number `turn` of a (group, topic) asks its sources: this worker's
    shards, then the other owners but those whose own clients pop it (`served`), except on every
    `REMOTE_FIRST_EVERY`-th turn, which asks the unserved owners first and the served ones last.
    Each list rotates, so every source is asked first in its turn."""
    local_turn = turn - (turn + 1) // REMOTE_FIRST_EVERY  # local shards' own count of turns
    if turn % REMOTE_FIRST_EVERY == REMOTE_FIRST_EVERY - 1:
        owners = _rotated(remote, turn // REMOTE_FIRST_EVERY)
        unserved = [owner for owner in owners if owner not in served]
        return [*unserved, *_rotated(local, local_turn), *(o for o in owners if o in served)]
    return [*_rotated(local, local_turn), *(o for o in _rotated(remote, turn) if o not in served)]


def _rotated(items: Sequence[L], turn: int) -> list[L]:
    start = turn % len(items) if items else 0
    return [*items[start:], *items[:start]]
