"""librdkafka settings shared by every client kpd makes, so they are chosen in one place."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from foundation.config import Settings
from foundation.record_size import message_limit

# A partition just created answers "not leader" for a moment, and librdkafka does not mark that
# answer to a watermark query retriable; before that, the client's own metadata may not know the
# partition yet ("Local: Unknown partition"). Both pass: the callers ask only for partitions the
# cluster told them of.
NOT_READY_YET = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
)
UNKNOWN_HERE = frozenset({KafkaError._UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART})

REBOOTSTRAP_AFTER_MS = 10_000
DEFAULT_BATCH_BYTES = 1_000_000  # librdkafka's default, below Kafka's default topic limit


def base_config(settings: Settings) -> dict[str, Any]:
    return {
        "bootstrap.servers": settings.bootstrap,
        "client.id": f"kpd-{settings.node_id}",
        # librdkafka logs connection errors itself; the probe reports reachability instead.
        "log_level": 3,
        # After a broker outage a client that keeps failing on metadata re-resolves the bootstrap
        # list; librdkafka waits 5 minutes by default, which left sidecars unready that long.
        "metadata.recovery.rebootstrap.trigger.ms": REBOOTSTRAP_AFTER_MS,
        # kpd creates topics only with CreateTopics. librdkafka's producers (and so
        # confluent-kafka's admin clients) otherwise ask a broker with auto.create.topics.enable,
        # Kafka's default, to create any topic they look up or write: a name a client merely
        # gave, or a target deleted since its schedule was accepted.
        "allow.auto.create.topics": False,
    }


def producer_config(settings: Settings) -> dict[str, Any]:
    """Every kpd producer can write whatever kpd accepted (see foundation.record_size), and never
    batches past a topic's `max.message.bytes`, which the broker applies to whole batches: not
    kpd's own topics' (the accepted size plus the envelope), nor the broker default (1 MB)."""
    limit = message_limit(settings.max_record_bytes)
    return {
        **base_config(settings),
        "message.max.bytes": limit,
        "batch.size": min(DEFAULT_BATCH_BYTES, limit),
    }


# Consumers prefetch up to this much per partition (librdkafka's default is 64 MB); kpd consumes
# in small steps, so a few MB keep it fed while memory stays flat as topics grow.
PREFETCH_KBYTES = 8_192
# How long the broker may hold a fetch of the leaders' consumers that finds nothing. A record
# that arrives answers a held fetch at once (produce -> consume latency measured the same at 10,
# 100 and 500 ms), so this bounds only the idle polling: one read_committed consumer cost the
# broker 0.33 cores at 5 ms, 0.22 at 10 and 0.045 at 500.
HELD_FETCH_MS = 100


def admin_client(settings: Settings) -> AdminClient:
    return AdminClient(base_config(settings))


class LazyAdmin:
    """An admin client made on its first use: a role that asks rarely (whether a target
    exists, a refusing topic's limit) holds no client, nor its threads, until it asks."""

    def __init__(self, client_config: dict[str, Any]) -> None:
        self._config = client_config
        self._admin: AdminClient | None = None

    def client(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(self._config)
        return self._admin

    def list_topics(self, *args: Any, **kwargs: Any) -> Any:
        return self.client().list_topics(*args, **kwargs)


def transactional_producer(producer_config: dict[str, Any], transactional_id: str) -> Producer:
    """The leader's writer: one fixed id per role, so a new leader fences the old one."""
    return Producer(
        {
            **producer_config,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": 30_000,
            "linger.ms": 1,
            "queue.buffering.max.messages": 1_000_000,
            # A step's records are sent and committed before the next; a small local queue
            # bounds memory without slowing that down (librdkafka's default allows 1 GB).
            "queue.buffering.max.kbytes": 65_536,
            # Java clients' partitioner, so a record kpd writes for a key lands where the
            # producer's own record with that key would have.
            "partitioner": "murmur2_random",
            # A transaction begun right after the previous commit is often answered
            # CONCURRENT_TRANSACTIONS while the broker writes the markers; the default 100 ms
            # retry backoff then added ~100 ms to every step (measured in bench/pop.py).
            "retry.backoff.ms": 5,
            "retry.backoff.max.ms": 100,
        }
    )


def state_consumer(client_config: dict[str, Any], group_id: str, **overrides: Any) -> Consumer:
    """A consumer of committed data only, positioned by kpd (assign), never auto-committing."""
    return Consumer(
        {
            **client_config,
            "group.id": group_id,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",  # aborted writes of a fenced leader stay unseen
            "auto.offset.reset": "earliest",
            "queued.max.messages.kbytes": PREFETCH_KBYTES,
            **overrides,
        }
    )


def consume_ready(consumer: Consumer, most: int, timeout_s: float) -> list[Message]:
    """Up to `most` records, returned as soon as there is one. librdkafka's batch consume waits
    out its whole timeout unless the batch fills (confluent-kafka-python #407): a single record
    that came in waited up to the whole timeout (50 ms for a delay leader's read)."""
    messages = consumer.consume(num_messages=most, timeout=0)
    if messages or timeout_s <= 0:
        return messages
    messages = consumer.consume(num_messages=1, timeout=timeout_s)
    if messages and most > 1:
        messages += consumer.consume(num_messages=most - 1, timeout=0)
    return messages


def release_producer(producer: Producer) -> None:
    """Let a leader's producer send what it still holds, for a second at most. One that was fenced
    or failed for good has nothing it may send and raises: that is why its role stops, not news."""
    with contextlib.suppress(KafkaException):
        producer.flush(1)


def partition_ends(
    admin: AdminClient, partitions: list[TopicPartition], timeout_s: float
) -> dict[tuple[str, int], int]:
    """The ends (last stable offsets) of many partitions in one call of the admin client. Not a
    consumer's watermark query: that waits behind the consumer's own long-poll fetch on the same
    connection, once per partition."""
    if not partitions:
        return {}
    asked = {TopicPartition(tp.topic, tp.partition): OffsetSpec.latest() for tp in partitions}
    futures = admin.list_offsets(
        asked, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=timeout_s
    )
    return {(tp.topic, tp.partition): future.result().offset for tp, future in futures.items()}


def stable_ends(
    client_config: dict[str, Any],
    partitions: list[TopicPartition],
    deadline: float,
    call_timeout_s: float,
) -> dict[tuple[str, int], int]:
    """Each partition's end (the last stable offset), as `partition_bounds` asks it, through a
    consumer of its own that never fetches: a reading consumer's query waits behind its own
    long-poll fetch on the same connection, once per partition."""
    if not partitions:
        return {}
    asker = state_consumer(client_config, "kpd-watermarks")
    try:
        return {
            (tp.topic, tp.partition): partition_bounds(asker, tp, deadline, call_timeout_s)[1]
            for tp in partitions
        }
    finally:
        asker.close()


def partition_bounds(
    consumer: Consumer, tp: TopicPartition, deadline: float, call_timeout_s: float
) -> tuple[int, int]:
    """The partition's first offset and its end (for a read_committed consumer, the last stable
    offset), waiting out a partition just created (`NOT_READY_YET`) and other retriable errors
    until `deadline`."""
    while True:
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=call_timeout_s)
            return int(low), int(high)
        except KafkaException as error:
            code = error.args[0].code()
            passing = error.args[0].retriable() or code in NOT_READY_YET
            if not passing or time.monotonic() > deadline:
                raise
            if code in UNKNOWN_HERE:  # ask for the topic: the client's cache may keep it unknown
                with contextlib.suppress(KafkaException):
                    consumer.list_topics(tp.topic, timeout=call_timeout_s)
            time.sleep(0.1)
