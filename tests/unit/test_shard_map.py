"""Where keys and lanes land: Kafka's own partitioner, and an even spread of a topic's lanes."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from foundation.shards import ShardMap, default_schedule_id, lane_key, murmur2, partition_of

# Apache Kafka's UtilsTest.testMurmur2 vectors, as Java's signed ints.
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
    # Lengths the vectors above miss (0, and 1 byte past a word), from kafka-clients 4.2.1's
    # Utils.murmur2.
    b"": 275646681,
    b"x": 2121525046,
    b"hello": 2132663229,
    b"b3-1234567-1764070000000": 438959297,
}


@pytest.mark.parametrize(("data", "signed"), JAVA_VECTORS.items())
def test_murmur2_is_kafkas(data: bytes, signed: int) -> None:
    assert murmur2(data) == signed & 0xFFFFFFFF


def test_a_keyed_record_lands_where_kafkas_partitioner_puts_it() -> None:
    assert partition_of(b"foobar", 50) == 16
    assert partition_of("foobar", 50) == 16  # a str key: its UTF-8 bytes
    with pytest.raises(ValueError, match="at least one partition"):
        partition_of(b"foobar", 0)


@given(st.text(max_size=40), st.integers(1, 10_000))
def test_a_str_key_is_hashed_as_its_utf8_bytes(key: str, partitions: int) -> None:
    placed = partition_of(key, partitions)
    assert placed == partition_of(key.encode(), partitions)
    assert placed == (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


@pytest.mark.parametrize(("shards", "topic_partitions"), [(2, 2), (4, 4), (8, 8), (4, 12)])
def test_a_topics_lanes_spread_evenly_over_shards(shards: int, topic_partitions: int) -> None:
    shard_map = ShardMap(shards, shards)
    for group, topic in [("g", "orders"), ("billing", "kpd.retry.billing"), ("a", "b")]:
        per_shard = Counter(shard_map.of_lane(group, topic, p) for p in range(topic_partitions))
        assert set(per_shard) == set(range(shards))
        assert set(per_shard.values()) == {topic_partitions // shards}


def test_lanes_of_different_topics_start_on_different_shards() -> None:
    shard_map = ShardMap(8, 8)
    starts = {shard_map.of_lane("g", f"topic-{i}", 0) for i in range(64)}
    assert len(starts) > 4


def test_a_lane_is_owned_by_the_shard_of_its_state_partition() -> None:
    shard_map = ShardMap(4, 12)
    for p in range(24):
        partition = shard_map.lane_partition("g", "orders", p)
        assert 0 <= partition < 12
        assert shard_map.of_lane("g", "orders", p) == partition % 4
        assert partition in shard_map.partitions(shard_map.of_lane("g", "orders", p))


def test_one_shard_keeps_the_per_lane_placement_of_deployments_before_shards() -> None:
    shard_map = ShardMap(1, 6)
    for p in range(12):
        expected = partition_of(lane_key("g", "orders", p).encode(), 6)
        assert shard_map.lane_partition("g", "orders", p) == expected


def test_fewer_partitions_than_shards_is_refused() -> None:
    with pytest.raises(ValueError, match="at least as many partitions"):
        ShardMap(4, 2)


@pytest.mark.parametrize(("shards", "state_partitions"), [(1, 1), (1, 6), (2, 2), (8, 8), (4, 12)])
def test_a_default_id_belongs_to_the_shard_reading_its_buffer_partition(
    shards: int, state_partitions: int
) -> None:
    shard_map = ShardMap(shards, state_partitions)
    for buffer_partition in range(3 * shards):
        schedule_id = default_schedule_id(buffer_partition, 12_345, 1_764_070_000_000)
        assert shard_map.of_key(schedule_id) == buffer_partition % shards
        # Its state goes to a partition of that shard, written there explicitly.
        partition = shard_map.partition_of_key(schedule_id)
        assert partition in shard_map.partitions(buffer_partition % shards)
        assert shard_map.produce_partition(schedule_id) == partition


@pytest.mark.parametrize(
    "schedule_id",
    [
        "b3-1234567-1764070000000",  # a default id made before the placement: hashed, as then
        "order-17",
        "kpd:",
        "kpd:-1-2",
        "kpd:x3-1-2",
        "kpd:" + "9" * 10 + "-1-2",  # more digits than any partition has
        "kpd:\u0663-1-2",  # a non-ASCII digit
        "KPD:3-1-2",
    ],
)
def test_any_other_id_lands_where_kafkas_partitioner_puts_it(schedule_id: str) -> None:
    shard_map = ShardMap(8, 8)
    expected = partition_of(schedule_id.encode(), 8)
    assert shard_map.partition_of_key(schedule_id) == expected
    assert shard_map.of_key(schedule_id) == expected
    assert shard_map.produce_partition(schedule_id) == -1  # the producer's murmur2 places it
