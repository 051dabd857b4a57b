"""Shards: how kpd's work is split among sidecars (docs/principles.md, 2).

A shard owns the partitions `p` with `p % shards == s` of each of kpd's state topics, and what
is placed there: schedule ids and pop lanes (group, source topic, partition). An id lands where
Kafka's own (Java) partitioner puts it, murmur2 of the id modulo the partition count, so a record
anyone writes keyed by an id is in the partition its shard reads. A topic's lanes go round the
partitions from a start hashed from (group, topic), so its load spreads evenly (kpd writes their
records to that partition explicitly). The id kpd gives a buffer record that names none says
which buffer partition it was read from, and belongs to the shard that reads that partition:
such a record is never re-keyed through another shard's inbox. A deployment made before shards
existed (one election partition, any number of state partitions) is a valid one-shard
deployment. New deployments create every state topic with one partition per shard, so there
shard(key) is partition(key). The hash runs in the compiled core (`kpd_core.partition_of`).
"""

from __future__ import annotations

from kpd_core import murmur2 as murmur2
from kpd_core import partition_of as partition_of

DEFAULT_ID_PREFIX = "kpd:"
_MAX_PARTITION_DIGITS = 9  # a hostile id's digits never reach int() unbounded


def default_schedule_id(partition: int, offset: int, timestamp_ms: int) -> str:
    """The id of a buffer record that names none: its place, unique even if the buffer topic is
    recreated (the timestamp). The prefix is not the `b` of ids made before this placement, so
    their cancels still meet them where their hash put them."""
    return f"{DEFAULT_ID_PREFIX}{partition}-{offset}-{timestamp_ms}"


def _buffer_partition(schedule_id: str) -> int | None:
    """The buffer partition a default id names, None for any other id."""
    if not schedule_id.startswith(DEFAULT_ID_PREFIX):
        return None
    head = schedule_id[len(DEFAULT_ID_PREFIX) :].partition("-")[0]
    if head.isascii() and head.isdigit() and len(head) <= _MAX_PARTITION_DIGITS:
        return int(head)
    return None


class ShardMap:
    """Which shard a key or a state-topic partition belongs to."""

    def __init__(self, shards: int, state_partitions: int) -> None:
        if shards < 1 or state_partitions < shards:
            raise ValueError(
                f"{shards} shards need at least as many partitions, not {state_partitions}"
            )
        self.shards, self.state_partitions = shards, state_partitions

    def of_partition(self, partition: int) -> int:
        return partition % self.shards

    def partitions(self, shard: int, partitions: int | None = None) -> list[int]:
        """The partitions of a topic of `partitions` (default: a state topic's) shard owns."""
        count = self.state_partitions if partitions is None else partitions
        return [p for p in range(count) if p % self.shards == shard]

    def partition_of_key(self, key: str) -> int:
        """The state-topic partition of schedule id `key`: where Kafka puts a record keyed by it,
        or for a default id, the first partition of the shard that reads its buffer partition."""
        buffer_partition = _buffer_partition(key)  # as in `produce_partition`, one call less
        if buffer_partition is None:
            return partition_of(key, self.state_partitions)
        return buffer_partition % self.shards

    def produce_partition(self, key: str) -> int:
        """The partition to write schedule id `key`'s state to: -1 (the producer's own murmur2
        partitioner, the same partition computed in C) unless kpd places the id itself."""
        buffer_partition = _buffer_partition(key)
        return -1 if buffer_partition is None else self.of_partition(buffer_partition)

    def of_key(self, key: str) -> int:
        return self.of_partition(self.partition_of_key(key))

    def lane_partition(self, group: str, topic: str, partition: int) -> int:
        """The state-topic partition of a lane: one partition of a popped (or retry) topic for one
        group. A topic's partitions go round-robin over the state partitions, from a start hashed
        from (group, topic), so a topic with as many partitions as there are shards gives every
        shard one lane; hashing each lane alone left one of four workers with none. One shard keeps
        the per-lane hash that deployments made before shards wrote their pop state under."""
        if self.shards == 1:
            return partition_of(lane_key(group, topic, partition), self.state_partitions)
        start = partition_of(f"{group}/{topic}", self.state_partitions)
        return (start + partition) % self.state_partitions

    def of_lane(self, group: str, topic: str, partition: int) -> int:
        """The shard that serves one lane."""
        return self.of_partition(self.lane_partition(group, topic, partition))


def lane_key(group: str, topic: str, partition: int) -> str:
    return f"{group}/{topic}/{partition}"
