"""`kpd topics create|list|describe` and `kpd groups list` as real processes against the real
broker: what they print, what they change in Kafka, and their exit codes (0 done, 1 Kafka
refused or unreachable, 2 bad usage with nothing sent)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import ConfigResource
from kafka_helpers import pop_until, produce_to_partition, unique, wait_for

from kpd_client import KpdClient
from kpd_client.client import PoppedMessage

DONE, FAILED, USAGE = 0, 1, 2


@pytest.fixture
def namespace() -> str:
    return unique("verbs")


def kpd(bootstrap: str, namespace: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"KPD_BOOTSTRAP": bootstrap, "KPD_STATE_TOPIC_PREFIX": f"{namespace}.", "PATH": ""}
    return subprocess.run(
        [sys.executable, "-m", "kpd_cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def offset(message: PoppedMessage) -> int:
    return message.offset


def expect(result: subprocess.CompletedProcess[str], code: int) -> subprocess.CompletedProcess[str]:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    return result


def rows(result: subprocess.CompletedProcess[str]) -> list[dict]:
    return [json.loads(line) for line in expect(result, DONE).stdout.splitlines()]


def test_create_list_and_describe_a_topic(kafka_bootstrap, admin, topic_cleanup, namespace):
    name = unique("orders")
    topic_cleanup.names.add(name)
    made = kpd(
        kafka_bootstrap, namespace, "topics", "create", name,
        "--partitions", "3", "--config", "retention.ms=3600000", "--json",
    )  # fmt: skip
    assert rows(made) == [{"topic": name, "partitions": 3, "replication": 1}]
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    config = admin.describe_configs([resource])[resource].result(timeout=30)
    assert config["retention.ms"].value == "3600000"

    listed = rows(kpd(kafka_bootstrap, namespace, "topics", "list", "--json"))
    assert {"topic": name, "partitions": 3, "kpd": False} in listed
    assert not any(row["topic"].startswith("__") for row in listed)

    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    produce_to_partition(producer, name, 1, [(None, f"v{i}".encode(), []) for i in range(5)])
    leader = admin.list_topics(name, timeout=30).topics[name].partitions[0].leader
    described = rows(kpd(kafka_bootstrap, namespace, "topics", "describe", name, "--json"))
    assert described == [
        {
            "partition": p, "leader": leader, "replicas": [leader], "isr": [leader],
            "start_offset": 0, "end_offset": 5 if p == 1 else 0,
        }
        for p in range(3)
    ]  # fmt: skip
    table = expect(kpd(kafka_bootstrap, namespace, "topics", "describe", name), DONE).stdout
    assert table.splitlines()[0].split() == [
        "PARTITION", "LEADER", "REPLICAS", "ISR", "START_OFFSET", "END_OFFSET",
    ]  # fmt: skip

    again = expect(kpd(kafka_bootstrap, namespace, "topics", "create", name), FAILED)
    assert "TOPIC_ALREADY_EXISTS" in again.stderr


def test_refused_names_flags_and_configs_create_nothing(
    kafka_bootstrap, admin, topic_cleanup, namespace
):
    name = unique("refused")
    topic_cleanup.names.add(name)
    usage = [
        ("topics", "create", "a b"),
        ("topics", "create", "x" * 250),
        ("topics", "create", ".."),
        ("topics", "create", "__consumer_offsets_too"),
        ("topics", "create", f"{namespace}.retry.g"),  # kpd's own, under its prefix
        ("topics", "create", "kpd.delay"),  # the buffer topic's default name
        ("topics", "create", name, "--partitions", "0"),
        ("topics", "create", name, "--partitions", "ten"),
        ("topics", "create", name, "--replication", "33"),
        ("topics", "create", name, "--config", "no-equals-sign"),
        ("topics", "create", name, "--config", "Bad Key=1"),
        ("topics", "create", name, *["--config", "retention.ms=1"] * 101),
        ("topics", "list", "--bootstrap", "not a host list"),
    ]
    for args in usage:
        expect(kpd(kafka_bootstrap, namespace, *args), USAGE)
    # The broker's own refusal: exit 1 with its reason, and no topic.
    bad_value = kpd(
        kafka_bootstrap, namespace, "topics", "create", name, "--config", "retention.ms=soon"
    )
    assert "INVALID_CONFIG" in expect(bad_value, FAILED).stderr
    assert name not in admin.list_topics(timeout=30).topics

    missing = expect(kpd(kafka_bootstrap, namespace, "topics", "describe", name), FAILED)
    assert f"topic_not_found: topic {name!r} does not exist" in missing.stderr
    nobody = kpd("127.0.0.1:1", namespace, "topics", "list")
    assert "kpd: Kafka at 127.0.0.1:1: _TRANSPORT" in expect(nobody, FAILED).stderr
    assert "rdkafka" not in nobody.stderr  # one line, not librdkafka's log of every connect


def test_groups_list_shows_pop_groups_with_their_backlog(
    sidecar_factory, new_topic, kafka_bootstrap
):
    sidecar = sidecar_factory("g").start()
    namespace = sidecar.env["KPD_STATE_TOPIC_PREFIX"].rstrip(".")
    topic = new_topic("backlog")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    produce_to_partition(producer, topic, 0, [(None, f"m{i}".encode(), []) for i in range(5)])
    assert rows(kpd(kafka_bootstrap, namespace, "groups", "list", "--json")) == []
    assert expect(kpd(kafka_bootstrap, namespace, "groups", "list"), DONE).stdout == (
        "no pop groups\n"
    )

    with KpdClient(sidecar.url) as client:
        popped = sorted(pop_until(client, "g", topic, 3, invisible_ms=600_000), key=offset)
        assert [m.offset for m in popped] == [0, 1, 2]
        assert client.ack("g", [popped[0].receipt])[0]["status"] == "acked"

        def listed() -> dict:
            found = rows(kpd(kafka_bootstrap, namespace, "groups", "list", "--json"))
            return found[0] if found else {}

        # Offset 1 is still leased: the committed offset stops there, so 4 records are behind.
        wait_for(lambda: listed().get("lag") == 4, 30, "the group's offset committed")
        assert listed() == {
            "group": "g", "topics": [topic], "lag": 4, "retry_lag": 0, "dlq_offsets": 0,
        }  # fmt: skip

        assert client.reject("g", [popped[1].receipt])[0]["status"] == "dead_lettered"
        assert client.nack("g", [popped[2].receipt], 0)[0]["status"] == "requeued"
        wait_for(lambda: listed().get("lag") == 2, 30, "offsets past the settled records")
    row = listed()
    assert row["dlq_offsets"] > 0  # the dead letter (and its transaction's marker)
    assert row["retry_lag"] > 0  # the retry copy (due at once), not popped yet
    table = expect(kpd(kafka_bootstrap, namespace, "groups", "list"), DONE).stdout.splitlines()
    assert table[0].split() == ["GROUP", "TOPICS", "LAG", "RETRY_LAG", "DLQ_OFFSETS"]
    assert table[1].split()[:3] == ["g", topic, "2"]
