"""kpd's topics, and how many shards a deployment has.

The shard count is fixed when the topics are created: the election topic has one partition per
shard (`KPD_SHARDS`), and so do the state topics of a new deployment. An existing deployment keeps
what its topics say: one made before shards existed has a one-partition election topic, so it
runs as one shard, whatever partitions its state topics have (`foundation.shards`).
"""

from __future__ import annotations

from confluent_kafka.admin import AdminClient

from foundation.config import Settings
from foundation.shards import ShardMap
from foundation.topics import COMPACTED, TopicSpec, ensure_topics, with_message_limit

ELECTION_RETENTION = {"retention.ms": str(3_600_000), "segment.ms": str(600_000)}
# The broker stamps these records itself: how far each node's clock is from it (broker_clock).
CLOCK = {**ELECTION_RETENTION, "message.timestamp.type": "LogAppendTime"}


class TopologyError(RuntimeError):
    """The existing topics do not make a valid deployment (the message says how to fix it)."""


def kpd_topic_names(settings: Settings) -> list[str]:
    """Every topic kpd owns (never a delivery target, never popped)."""
    return [spec.name for spec in _specs(settings, shards=1)]


def _specs(settings: Settings, shards: int) -> list[TopicSpec]:
    s = settings
    default = shards if s.topic_partitions == -1 else s.topic_partitions
    specs = [
        TopicSpec(s.buffer_topic, partitions=default),
        TopicSpec(s.invalid_topic),
        TopicSpec(s.delivery_log_topic),
        TopicSpec(s.state_topic("schedules"), COMPACTED, partitions=shards),
        TopicSpec(s.state_topic("leader"), ELECTION_RETENTION, partitions=shards),
        TopicSpec(s.state_topic("pop-state"), partitions=shards),
        TopicSpec(s.state_topic("delay-inbox"), partitions=shards),
        TopicSpec(s.state_topic("clock"), CLOCK, partitions=1),
    ]
    return [with_message_limit(spec, s.max_record_bytes) for spec in specs]


def set_up(admin: AdminClient, settings: Settings) -> ShardMap:
    """Create what is missing; the shard map the existing topics (or the settings) give."""
    timeout_s = settings.kafka_timeout_ms / 1000
    existing = admin.list_topics(timeout=timeout_s).topics
    election, schedules = settings.state_topic("leader"), settings.state_topic("schedules")
    shards = len(existing[election].partitions) if election in existing else settings.shards
    specs = _specs(settings, shards)
    ensure_topics(admin, specs, settings.topic_partitions, settings.topic_replication, timeout_s)
    topics = admin.list_topics(timeout=timeout_s).topics
    pop_state, inbox = settings.state_topic("pop-state"), settings.state_topic("delay-inbox")
    counts = {name: len(topics[name].partitions) for name in (schedules, pop_state, inbox)}
    if min(counts.values()) < shards or counts[schedules] != counts[pop_state]:
        raise TopologyError(
            f"{election} has {shards} partitions (the shards) and the state topics {counts}: "
            f"each needs at least one partition per shard, and {schedules} as many as "
            f"{pop_state} (keys are placed by partition count)"
        )
    return ShardMap(shards, counts[schedules])
