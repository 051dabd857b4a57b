"""Create the topics kpd owns when they are missing, with the configured partitions and replicas."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

import structlog
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
    TopicMetadata,
)

from foundation.record_size import message_limit

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class TopicSpec:
    name: str
    config: dict[str, str] = field(default_factory=dict)
    partitions: int | None = None  # None: the configured default


COMPACTED = {"cleanup.policy": "compact"}
MESSAGE_LIMIT = "max.message.bytes"


def with_message_limit(spec: TopicSpec, max_record_bytes: int) -> TopicSpec:
    """kpd's own topics take whatever kpd accepted (see foundation.record_size)."""
    limit = str(message_limit(max_record_bytes))
    return replace(spec, config={**spec.config, MESSAGE_LIMIT: limit})


def ensure_topics(
    admin: AdminClient,
    specs: list[TopicSpec],
    partitions: int,
    replication: int,
    timeout_s: float,
) -> list[str]:
    """Create the missing ones; return the names created. Of existing topics only a
    `max.message.bytes` below the spec's is raised (kpd must be able to write what it accepts)."""
    existing = set(admin.list_topics(timeout=timeout_s).topics)
    missing = [spec for spec in specs if spec.name not in existing]
    _raise_message_limits(admin, [s for s in specs if s.name in existing], timeout_s)
    if not missing:
        return []
    futures = admin.create_topics(
        [
            NewTopic(
                spec.name,
                num_partitions=spec.partitions or partitions,
                replication_factor=replication,
                config=spec.config,
            )
            for spec in missing
        ],
        request_timeout=timeout_s,
    )
    created = []
    for name, future in futures.items():
        try:
            future.result(timeout=timeout_s)
            created.append(name)
        except KafkaException as error:
            # Another sidecar may have created it a moment ago.
            if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    # Those another client created a moment ago too: they may not be led yet either.
    await_leaders(admin, [spec.name for spec in missing], timeout_s)
    log.info("topics created", topics=sorted(created))
    return created


def await_leaders(
    client: AdminClient | Consumer, topics: list[str], timeout_s: float
) -> dict[str, TopicMetadata]:
    """Every topic's metadata, once each of `topics` has a leader for every partition. A topic
    just created is unknown to the broker's metadata, or its partitions unled, for a moment:
    wait, within `timeout_s` (a KafkaException past it)."""
    deadline = time.monotonic() + timeout_s
    while True:
        metadata = client.list_topics(timeout=timeout_s).topics
        if all(_led(metadata.get(t)) for t in topics):
            return metadata
        if time.monotonic() >= deadline:
            unled = sorted(t for t in topics if not _led(metadata.get(t)))
            raise KafkaException(
                KafkaError(KafkaError._TIMED_OUT, f"topics without leaders: {unled}")
            )
        time.sleep(0.05)


def _led(topic: TopicMetadata | None) -> bool:
    return (
        topic is not None
        and topic.error is None
        and bool(topic.partitions)
        and all(p.leader >= 0 for p in topic.partitions.values())
    )


def message_limit_of(admin: AdminClient, topic: str, timeout_s: float) -> int:
    """The topic's `max.message.bytes` as the broker applies it."""
    resource = ConfigResource(ResourceType.TOPIC, topic)
    config = admin.describe_configs([resource], request_timeout=timeout_s)[resource]
    return int(config.result(timeout=timeout_s)[MESSAGE_LIMIT].value)


def _raise_message_limits(admin: AdminClient, specs: list[TopicSpec], timeout_s: float) -> None:
    wanted = {s.name: int(s.config[MESSAGE_LIMIT]) for s in specs if MESSAGE_LIMIT in s.config}
    if not wanted:
        return
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in wanted]
    described = admin.describe_configs(resources, request_timeout=timeout_s)
    low = []
    for resource, future in described.items():
        entry = future.result(timeout=timeout_s).get(MESSAGE_LIMIT)
        current = int(entry.value) if entry is not None and entry.value else 0
        if current < wanted[resource.name]:
            value = str(wanted[resource.name])
            change = ConfigEntry(MESSAGE_LIMIT, value, incremental_operation=AlterConfigOpType.SET)
            topic = ConfigResource(ResourceType.TOPIC, resource.name, incremental_configs=[change])
            low.append(topic)
    if not low:
        return
    for resource, future in admin.incremental_alter_configs(low).items():
        future.result(timeout=timeout_s)
        log.info("raised max.message.bytes", topic=resource.name, to=wanted[resource.name])


class TopicCache:
    """Does a topic exist? Cached, because the answer is needed per record.

    Known topics are remembered for good; unknown ones are asked again after `retry_s`, so a topic
    created a moment later is picked up without a metadata request per rejected record.
    """

    def __init__(
        self,
        client: AdminClient | Any,
        timeout_s: float,
        retry_s: float = 2.0,
        recheck_known_s: float | None = None,
    ) -> None:
        self._client = client  # anything with list_topics(topic=..., timeout=...)
        self._timeout_s, self._retry_s = timeout_s, retry_s
        self._recheck_known_s = recheck_known_s  # None: a topic once seen is trusted for good
        self._known: dict[str, float] = {}  # topic -> when it was last seen to exist
        self._counts: dict[str, int] = {}  # topic -> its partitions when last seen
        self._unknown: dict[str, float] = {}

    def partitions(self, topic: str) -> int:
        """How many partitions `topic` has; 0 if it does not exist (asked as `exists` is)."""
        return self._counts.get(topic, 0) if self.exists(topic) else 0

    def known(self, topic: str) -> bool:
        """Answer from the cache alone (no request): True only for topics seen to exist."""
        return topic in self._known

    def exists_now(self, topic: str) -> bool:
        """Asked of the broker now, whatever the cache holds (a refusal said it may be gone)."""
        self._known.pop(topic, None)
        self._unknown.pop(topic, None)
        return self.exists(topic)

    def exists(self, topic: str) -> bool:
        seen = self._known.get(topic)
        if seen is not None and (
            self._recheck_known_s is None or time.monotonic() - seen < self._recheck_known_s
        ):
            return True
        checked = self._unknown.get(topic)
        if checked is not None and time.monotonic() - checked < self._retry_s:
            return False
        metadata = self._client.list_topics(topic=topic, timeout=self._timeout_s).topics.get(topic)
        if metadata is not None and metadata.error is None:
            self._known[topic] = time.monotonic()
            self._counts[topic] = len(metadata.partitions)
            self._unknown.pop(topic, None)
            return True
        self._known.pop(topic, None)
        if len(self._unknown) > 10_000:  # hostile input must not grow this without bound
            self._unknown.clear()
        self._unknown[topic] = time.monotonic()
        return False
