"""`kpd groups list`: the pop groups Kafka knows, with their backlog.

A pop group is a consumer group whose retry topic exists (kpd makes it at the group's first pop,
and commits the group's offsets under its name). Everything here is read from Kafka, so it
works with no sidecar running; `kpd groups GROUP` asks a sidecar for one group's live stats.
"""

from __future__ import annotations

import argparse
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, TopicMetadata

from foundation.config import Settings
from kpd_cli.printing import DONE, print_rows
from kpd_cli.topic_verbs import offsets


def listing(admin: AdminClient, settings: Settings, args: argparse.Namespace) -> int:
    timeout_s = settings.kafka_timeout_ms / 1000
    topics = admin.list_topics(timeout=timeout_s).topics
    answer = admin.list_consumer_groups(request_timeout=timeout_s).result(timeout=timeout_s)
    names = sorted(
        g.group_id for g in answer.valid if settings.group(g.group_id).retry_topic in topics
    )
    committed = {
        name: _committed(admin, name, topics[settings.group(name).retry_topic], timeout_s)
        for name in names
    }
    dead_letters = {
        name: [TopicPartition(dlq, p) for p in topics[dlq].partitions]
        for name in names
        if (dlq := settings.group(name).dlq_topic) in topics
    }
    asked = [tp for tps in committed.values() for tp in tps]
    asked += [tp for tps in dead_letters.values() for tp in tps]
    ends = offsets(admin, asked, timeout_s) if asked else {}
    rows = [
        _row(name, settings.group(name).retry_topic, committed[name], dead_letters, ends)
        for name in names
    ]
    print_rows(rows, args.json, "no pop groups")
    return DONE


def _committed(
    admin: AdminClient, group: str, retry: TopicMetadata, timeout_s: float
) -> list[TopicPartition]:
    """The group's committed offsets, and every partition of its retry topic (-1 where none is
    committed: the group has read none of it yet)."""
    asked = [ConsumerGroupTopicPartitions(group)]
    answer = admin.list_consumer_group_offsets(asked, request_timeout=timeout_s)[group]
    found = {
        (tp.topic, tp.partition): tp
        for tp in answer.result(timeout=timeout_s).topic_partitions or []
    }
    for partition in retry.partitions:
        found.setdefault((retry.topic, partition), TopicPartition(retry.topic, partition, -1))
    return list(found.values())


def _row(
    group: str,
    retry_topic: str,
    committed: list[TopicPartition],
    dead_letters: dict[str, list[TopicPartition]],
    ends: dict[tuple[str, int], tuple[int, int]],
) -> dict[str, Any]:
    """Lag as Kafka tooling counts it, transaction markers included: from the committed offset,
    or from the partition's first offset where the group committed none. The dead-letter topic's
    offsets (records and markers; 0: none) say whether it holds any: `kpd groups GROUP` counts
    them exactly."""

    def behind(tp: TopicPartition) -> int:
        first, end = ends[(tp.topic, tp.partition)]
        return max(0, end - max(tp.offset, first))

    originals = [tp for tp in committed if tp.topic != retry_topic]
    return {
        "group": group,
        "topics": sorted({tp.topic for tp in originals}),
        "lag": sum(behind(tp) for tp in originals),
        "retry_lag": sum(behind(tp) for tp in committed if tp.topic == retry_topic),
        "dlq_offsets": sum(
            end - first
            for first, end in (ends[(tp.topic, tp.partition)] for tp in dead_letters.get(group, []))
        ),
    }
