"""Topics the HTTP API neither produces to nor pops from.

kpd's own topics (buffer, logs, state; for pop also the group's retry and DLQ topics, which kpd
already reads for that group) would be corrupted or loop, and `__*` topics are Kafka's internals
(`__consumer_offsets`, `__transaction_state`, ...).
"""

from __future__ import annotations

from api.node import Node
from foundation.problem import ProblemCode


def refused_topic(
    node: Node, topic: str, group: str | None = None
) -> tuple[ProblemCode, str] | None:
    """(code, detail) when `topic` is refused (for pop: to `group`); None when it is allowed."""
    if topic.startswith("__"):
        return "internal_topic", f"topic {topic!r} is internal to Kafka"
    owned = topic in node.owned_topics()
    if group is not None and not owned:
        settings = node.settings.group(group)
        owned = topic in (settings.retry_topic, settings.dlq_topic)
    if owned:
        return "kpd_topic", f"topic {topic!r} belongs to kpd"
    return None
