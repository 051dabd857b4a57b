"""The peer of `bench/pop.py`: a Kafka share group (KIP-932) draining the same backlog, each record
ACCEPTed, from the same number of client processes.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from bench.delay_load import create_topic
from bench.pop_load import (
    PARTITIONS,
    CpuMeter,
    produce_backlog,
    run_processes,
)

SHARE_BATCHES = (10, 100, 1000)
WARM_UP_RECORDS = 3_000  # on a topic of their own, so every share group member gets some
WARM_UP_LIMIT_S = 30.0

if TYPE_CHECKING:
    from confluent_kafka import ShareConsumer


@contextlib.contextmanager
def share_consumer(bootstrap: str, group: str, batch: int) -> Iterator[ShareConsumer]:
    """A member of share group `group` that acknowledges explicitly and asks for `batch` records a
    poll (best effort in librdkafka); closed after, whatever the close raises."""
    from confluent_kafka import ShareConsumer

    consumer = ShareConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            "max.poll.records": batch,
            "log_level": 3,
        }
    )
    try:
        yield consumer
    finally:
        with contextlib.suppress(Exception):
            consumer.close()


def share_worker(
    bootstrap: str,
    group: str,
    topics: tuple[str, str],
    batch: int,
    sync_commit: bool,
    stop_at: float,
    target: int,
    accepted_total: Any,
    ready: Any,
    index: int,
    out: Any,
) -> None:
    """One share consumer: poll, ACCEPT each record, send the acknowledgements.

    `topics` = (warm-up, measured): the first warm-up record sets `ready[index]`; only records of
    the measured topic count. async: commit_async once per poll (acks also ride on the next
    ShareFetch); sync: commit_sync after every `batch` acknowledgements (one acknowledgement
    round trip per `batch` records, like a kpd ack call), since max.poll.records does not bound
    the poll size.
    """
    from confluent_kafka import AcknowledgeType

    warm_topic, topic = topics
    accepted = polls = pending = 0
    first = last = cpu0 = cpu_last = 0.0
    error = None
    try:
        with share_consumer(bootstrap, group, batch) as consumer:
            consumer.subscribe([warm_topic, topic])
            idle_since = time.time()
            while time.time() < stop_at and accepted_total.value < target:
                polled_at = time.process_time()
                messages = consumer.poll(0.5)
                good = 0
                for message in messages:
                    if message.error() is not None:
                        continue
                    consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                    pending += 1
                    if message.topic() == warm_topic:
                        ready[index] = 1
                    else:
                        good += 1
                    if sync_commit and pending >= batch:
                        consumer.commit_sync(30)
                        pending = 0
                if sync_commit and pending:
                    consumer.commit_sync(30)
                    pending = 0
                elif messages and not sync_commit:
                    consumer.commit_async()
                if not good:
                    if accepted and time.time() - idle_since > 5:
                        break  # backlog drained by the others
                    continue
                now = time.time()
                if not first:
                    first, cpu0 = now, polled_at
                last, idle_since, cpu_last = now, now, time.process_time()
                polls += 1
                accepted += good
                with accepted_total.get_lock():
                    accepted_total.value += good
    except Exception as exc:
        error = repr(exc)
    out.put(
        {
            "accepted": accepted,
            "polls": polls,
            "first": first,
            "last": last,
            # From the poll that brought its first measured record to its last: librdkafka's
            # threads included, the warm-up and the idle tail not.
            "cpu_s": cpu_last - cpu0,
            "error": error,
        }
    )


def configure_share_group(admin: AdminClient, name: str) -> None:
    """A share group that starts at the earliest offset and reads committed records only."""
    configs = {"share.auto.offset.reset": "earliest", "share.isolation.level": "read_committed"}
    resource = ConfigResource(
        ResourceType.GROUP,
        name,
        incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in configs.items()
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def share_throughput(
    ctx: Any,
    bootstrap: str,
    admin: AdminClient,
    batch: int,
    sync_commit: bool,
    procs: int,
    target: int,
    limit_s: float,
) -> dict[str, Any]:
    name = f"bench-share-b{batch}-{'sync' if sync_commit else 'async'}-{uuid.uuid4().hex[:6]}"
    warm, topic = (
        create_topic(admin, f"{name}-warm", PARTITIONS),
        create_topic(admin, name, PARTITIONS),
    )
    produce_backlog(bootstrap, warm, WARM_UP_RECORDS)
    _, held = produce_backlog(bootstrap, topic, target, **{"transactional.id": name})
    configure_share_group(admin, name)
    counter, ready = ctx.Value("q", 0), ctx.Array("b", procs)
    stop_at = time.time() + limit_s + WARM_UP_LIMIT_S
    visible: list[float] = []
    meter: list[CpuMeter] = []

    def release_backlog() -> None:
        """Once every member has a warm-up record (or the limit passed), commit the backlog."""
        deadline = time.monotonic() + WARM_UP_LIMIT_S
        while sum(ready[:]) < procs and time.monotonic() < deadline:
            time.sleep(0.05)
        visible.append(time.time())
        meter.append(CpuMeter(None))
        held.commit_transaction(30)
        meter[0].until(counter, target, stop_at)

    def args_for(i: int) -> tuple:
        return (bootstrap, name, (warm, topic), batch, sync_commit, stop_at, target, counter,
                ready, i)  # fmt: skip

    results = run_processes(
        ctx, share_worker, args_for, procs, limit_s + WARM_UP_LIMIT_S, release_backlog
    )
    accepted = sum(r["accepted"] for r in results)
    span = max((r["last"] for r in results), default=0) - visible[0]
    polls = sum(r["polls"] for r in results)
    return {
        "cpu_per_1k": meter[0].split(accepted, sum(r["cpu_s"] for r in results)),
        "batch": batch,
        "sync": sync_commit,
        "accepted": accepted,
        "seconds": span,
        "rate": accepted / span if span > 0 else 0.0,
        "mean_poll": accepted / polls if polls else 0.0,
        "members_warm": sum(ready[:]),
        "errors": [r["error"] for r in results if r["error"]],
        "processes_reporting": len(results),
    }
