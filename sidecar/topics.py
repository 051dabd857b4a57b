"""Create the topics kpd owns when they are missing, with the configured partitions and replicas."""

from __future__ import annotations

from dataclasses import dataclass, field

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
