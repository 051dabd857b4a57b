"""Forgetting a deleted group in one shard (`DELETE /v1/groups/{group}`, `api.queue_ops`).

In the shard's step: a `ForgetRecord` per ledger of the group makes the forgetting durable (a
new leader's replay drops what came before it), the ledgers and what memory leases left
unwritten go, and so do the group's fetcher and the offsets this shard had to send for it.
Retries the step was to write for the group (a nack served before in the same step) go too;
dead letters are still written. A pop of the group afterwards starts it afresh.
"""

from __future__ import annotations

from foundation.clock import now_ms
from revive.group_fetchers import GroupFetchers
from revive.offsets import OffsetCommitter
from revive.pop_state import PopState
from revive.pop_step import PopStep, Unwritten
from revive.records import ForgetRecord


def forget_group(
    group: str,
    state: PopState,
    parts: tuple[GroupFetchers, OffsetCommitter, Unwritten],
    step: PopStep,
) -> int:
    """Forget `group` here; how many ledgers it had."""
    fetchers, offsets, unwritten = parts
    keys = {key for key in state.ledgers if key[0] == group}
    unwritten.forget(keys)
    now = now_ms()
    for key in sorted(keys):
        record = ForgetRecord(*key, now)
        state.apply(record)
        step.record(record)
    state.dead_lettered.pop(group, None)
    step.drop_retries(group)
    fetchers.forget(group)
    offsets.forget(group)
    return len(keys)
