"""kpd's own topics made against a real broker: whoever asks for a topic (several shards' fetchers
of one group at once) gets it back led, and a fetcher never reads a topic the broker forgot."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from kafka_helpers import unique

from foundation.problem import Problem
from foundation.topics import TopicSpec, await_leaders, ensure_topics
from revive.fetcher import GroupFetcher

CLIENTS, PARTITIONS = 4, 8


def test_a_topic_many_clients_make_at_once_is_led_when_each_returns(
    kafka_bootstrap: str, topic_cleanup
) -> None:
    for _ in range(3):
        name = unique("made")
        topic_cleanup.names.add(name)
        created, led_on_return = made_at_once(kafka_bootstrap, name)
        assert sorted(created, key=len) == [[]] * (CLIENTS - 1) + [[name]]  # made once
        assert led_on_return == [PARTITIONS] * CLIENTS


def made_at_once(bootstrap: str, name: str) -> tuple[list[list[str]], list[int]]:
    """What `ensure_topics` answered each of `CLIENTS` clients asking for `name` at once, and
    how many of its partitions had a leader, seen by another client, as each call returned."""
    config = {"bootstrap.servers": bootstrap}
    start = threading.Barrier(CLIENTS)
    created: list[list[str]] = []
    led_on_return: list[int] = []

    def make(admin: AdminClient, reader: Consumer) -> None:
        start.wait()
        created.append(ensure_topics(admin, [TopicSpec(name)], PARTITIONS, 1, 30))
        # Another client's view, as a fetcher of another shard would ask it next.
        topic = reader.list_topics(timeout=30).topics.get(name)
        partitions = topic.partitions.values() if topic is not None else []
        led_on_return.append(sum(p.leader >= 0 for p in partitions))

    readers = [Consumer({**config, "group.id": unique("g")}) for _ in range(CLIENTS)]
    threads = [
        threading.Thread(target=make, args=(AdminClient(config), reader)) for reader in readers
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for reader in readers:
        reader.close()
    return created, led_on_return


def test_waiting_for_a_topic_nobody_makes_ends_at_its_bound(kafka_bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    started = time.monotonic()
    with pytest.raises(KafkaException) as raised:
        await_leaders(admin, [unique("never")], 0.5)
    assert raised.value.args[0].code() == KafkaError._TIMED_OUT
    assert 0.5 <= time.monotonic() - started < 5


def test_a_fetcher_asked_for_a_topic_the_broker_does_not_know_answers_not_found(
    kafka_bootstrap: str, new_topic
) -> None:
    retry = new_topic("retry")
    fetcher = GroupFetcher(
        unique("g"), retry, {"bootstrap.servers": kafka_bootstrap}, lambda _: -1, lambda *_: True
    )
    try:
        with pytest.raises(Problem) as raised:
            fetcher.add_topic(unique("gone"), 10)
        assert (raised.value.status, raised.value.code) == (404, "topic_not_found")
        assert fetcher.topics == set()  # nothing read: a later pop starts afresh
    finally:
        fetcher.close()
