"""Create the topics kpd owns when they are missing, with the configured partitions and replicas."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import structlog
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class TopicSpec:
    name: str
    config: dict[str, str] = field(default_factory=dict)
    partitions: int | None = None  # None: the configured default


COMPACTED = {"cleanup.policy": "compact"}


def ensure_topics(
    admin: AdminClient,
    specs: list[TopicSpec],
    partitions: int,
    replication: int,
    timeout_s: float,
) -> list[str]:
    """Create the missing ones; return the names created. Existing topics are left as they are."""
    existing = set(admin.list_topics(timeout=timeout_s).topics)
    missing = [spec for spec in specs if spec.name not in existing]
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
    log.info("topics created", topics=sorted(created))
    return created


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
        self._unknown: dict[str, float] = {}

    def known(self, topic: str) -> bool:
        """Answer from the cache alone (no request): True only for topics seen to exist."""
        return topic in self._known

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
            self._unknown.pop(topic, None)
            return True
        self._known.pop(topic, None)
        if len(self._unknown) > 10_000:  # hostile input must not grow this without bound
            self._unknown.clear()
        self._unknown[topic] = time.monotonic()
        return False
