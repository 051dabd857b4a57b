"""How often a worker's group client heartbeats (`cluster.membership`): a rebalance reaches a
member with its next heartbeat, so a long session must not slow down every shard move."""

from __future__ import annotations

from cluster.membership import heartbeat_interval_ms


def test_a_quarter_of_a_short_session_and_at_most_the_default_ones() -> None:
    assert [heartbeat_interval_ms(ms) for ms in (1_000, 2_000, 6_000)] == [250, 500, 1_500]
    assert [heartbeat_interval_ms(ms) for ms in (30_000, 300_000)] == [1_500, 1_500]
