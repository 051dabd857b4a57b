"""`kpd topics create|list|describe`: Kafka's topics through the admin API, so a new user makes
a first topic with kpd itself (a sidecar never creates a user's topic by asking for it)."""

from __future__ import annotations

import argparse
import re
import sys

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from foundation.config import TOPIC_PATTERN, Settings
from foundation.topics import await_leaders
from kpd_cli.printing import DONE, FAILED, print_rows
from kpd_client.cli_messages import UsageError

MAX_CONFIGS = 100  # --config flags of one create


def create(admin: AdminClient, settings: Settings, args: argparse.Namespace) -> int:
    name = checked_name(args.name, settings)
    config = _configs(args.config)
    timeout_s = settings.kafka_timeout_ms / 1000
    new = NewTopic(
        name,
        # -1: the broker's default (KIP-464), as for kpd's own topics
        num_partitions=args.partitions or settings.topic_partitions,
        replication_factor=args.replication or settings.topic_replication,
        config=config,
    )
    admin.create_topics([new], request_timeout=timeout_s)[name].result(timeout=timeout_s)
    partitions = await_leaders(admin, [name], timeout_s)[name].partitions
    replicas = len(next(iter(partitions.values())).replicas)
    print_rows(
        [{"topic": name, "partitions": len(partitions), "replication": replicas}], args.json, ""
    )
    return DONE


def listing(admin: AdminClient, settings: Settings, args: argparse.Namespace) -> int:
    """Every topic but Kafka's internal ones (`__*`); kpd's own are marked."""
    topics = admin.list_topics(timeout=settings.kafka_timeout_ms / 1000).topics
    rows = [
        {"topic": name, "partitions": len(meta.partitions), "kpd": _is_kpds(name, settings)}
        for name, meta in sorted(topics.items())
        if not name.startswith("__")
    ]
    print_rows(rows, args.json, "no topics")
    return DONE


def describe(admin: AdminClient, settings: Settings, args: argparse.Namespace) -> int:
    """One row per partition: leader, replicas, in-sync replicas, first and next offset."""
    name, timeout_s = args.name, settings.kafka_timeout_ms / 1000
    meta = admin.list_topics(topic=name, timeout=timeout_s).topics.get(name)
    if meta is None or meta.error is not None:
        print(f"kpd: topic_not_found: topic {name!r} does not exist", file=sys.stderr)
        return FAILED
    partitions = sorted(meta.partitions.values(), key=lambda p: p.id)
    ends = offsets(admin, [TopicPartition(name, p.id) for p in partitions], timeout_s)
    rows = [
        {
            "partition": p.id,
            "leader": p.leader,
            "replicas": p.replicas,
            "isr": p.isrs,
            "start_offset": ends[(name, p.id)][0],
            "end_offset": ends[(name, p.id)][1],
        }
        for p in partitions
    ]
    print_rows(rows, args.json, f"topic {name!r} has no partitions")
    return DONE


def offsets(
    admin: AdminClient, partitions: list[TopicPartition], timeout_s: float
) -> dict[tuple[str, int], tuple[int, int]]:
    """(first, next) offset of each partition: two ListOffsets requests for them all."""
    found: dict[tuple[str, int], list[int]] = {(tp.topic, tp.partition): [] for tp in partitions}
    for spec in (OffsetSpec.earliest(), OffsetSpec.latest()):
        asked = {tp: spec for tp in partitions}
        for tp, future in admin.list_offsets(asked, request_timeout=timeout_s).items():
            found[(tp.topic, tp.partition)].append(future.result(timeout=timeout_s).offset)
    return {key: (first, end) for key, (first, end) in found.items()}


def checked_name(name: str, settings: Settings) -> str:
    """A name Kafka accepts, and neither Kafka's (`__*`) nor kpd's (kpd makes those itself)."""
    if not re.fullmatch(TOPIC_PATTERN, name) or name in (".", ".."):
        raise UsageError(f"topic name {name!r}: 1-249 of A-Z a-z 0-9 . _ - (not . or ..)")
    if name.startswith("__"):
        raise UsageError(f"topic {name!r}: names starting with __ are Kafka's own")
    if _is_kpds(name, settings):
        raise UsageError(f"topic {name!r} is kpd's own: kpd makes it when it needs it")
    return name


def _is_kpds(name: str, settings: Settings) -> bool:
    own = (settings.buffer_topic, settings.invalid_topic, settings.delivery_log_topic)
    prefix = settings.state_topic_prefix
    return name in own or (bool(prefix) and name.startswith(prefix))


def _configs(pairs: list[str]) -> dict[str, str]:
    if len(pairs) > MAX_CONFIGS:
        raise UsageError(f"at most {MAX_CONFIGS} --config flags")
    config = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not re.fullmatch(r"[a-z0-9.]{1,128}", key):
            raise UsageError(f"--config {pair!r}: expected NAME=VALUE, as segment.ms=60000")
        config[key] = value
    return config
