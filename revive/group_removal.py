"""A deleted group's offsets, and (asked to) its topics, removed from Kafka.

Runs once every shard has forgotten the group (`revive.forget`): its committed offsets go, so
Kafka tooling no longer lists it and a pop under its name starts where a new group does. Its
retry topic stays unless its topics go too; then the group reads it from its end, so the retries
that waited there are not handed out again. With `topics`, the retry and DLQ topics are deleted,
and so is the position of the group's redrives in its DLQ (`revive.redrive`).
"""

from __future__ import annotations

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from foundation.config import Settings
from foundation.kafka_clients import base_config

_GONE = frozenset({KafkaError.GROUP_ID_NOT_FOUND, KafkaError.UNKNOWN_TOPIC_OR_PART})


class GroupInUse(Exception):
    """Consumers other than kpd's are members of the group."""


def check_unused(settings: Settings, group: str) -> None:
    """`GroupInUse` if consumers other than kpd's (whose consumers are never members: they are
    assigned their partitions) are members of the Kafka group (blocking)."""
    admin = AdminClient(base_config(settings))
    timeout_s = settings.kafka_timeout_ms / 1000
    future = admin.describe_consumer_groups([group], request_timeout=timeout_s)[group]
    if future.result(timeout=timeout_s).members:
        raise GroupInUse(f"consumers of group {group!r} are running: stop them first")


def remove_group(settings: Settings, group: str, topics: bool) -> list[str]:
    """Remove what Kafka holds of `group` (blocking: run it in a thread); the topics deleted."""
    admin = AdminClient(base_config(settings))
    timeout_s = settings.kafka_timeout_ms / 1000
    config = settings.group(group)
    assert config.retry_topic is not None and config.dlq_topic is not None
    groups = [group, settings.state_topic(f"redrive.{group}")] if topics else [group]
    for name, future in admin.delete_consumer_groups(groups, request_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as error:
            if error.args[0].code() == KafkaError.NON_EMPTY_GROUP:
                message = f"consumers of group {name!r} are running: stop them first"
                raise GroupInUse(message) from None
            if error.args[0].code() not in _GONE:
                raise
    if not topics:
        _start_at_end(admin, group, config.retry_topic, timeout_s)
        return []
    deleted = []
    asked = [config.retry_topic, config.dlq_topic]
    for topic, future in admin.delete_topics(asked, operation_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
            deleted.append(topic)
        except KafkaException as error:
            if error.args[0].code() not in _GONE:
                raise
    return deleted


def _start_at_end(admin: AdminClient, group: str, topic: str, timeout_s: float) -> None:
    """Commit `group`'s offsets of `topic` at its end: what it holds now is never read."""
    partitions = admin.list_topics(topic, timeout=timeout_s).topics[topic].partitions
    asked = {TopicPartition(topic, p): OffsetSpec.latest() for p in sorted(partitions)}
    if not asked:
        return
    ends = admin.list_offsets(asked, request_timeout=timeout_s)
    offsets = [
        TopicPartition(tp.topic, tp.partition, future.result(timeout=timeout_s).offset)
        for tp, future in ends.items()
    ]
    request = [ConsumerGroupTopicPartitions(group, offsets)]
    admin.alter_consumer_group_offsets(request, request_timeout=timeout_s)[group].result(
        timeout=timeout_s
    )
