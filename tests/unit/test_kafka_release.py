"""Per-release broker config, and the test-broker settings read from the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools.broker_for_tests import broker_settings_from_env, topic_replication_from_env
from devtools.kafka_release import KafkaRelease, UnsupportedKafkaVersion
from devtools.local_kafka import LocalKafkaError


def properties(version: str, partitions: int = 3) -> dict[str, str]:
    text = KafkaRelease(version).server_properties(
        port=1234, controller_port=5678, data_dir=Path("/d"), partitions=partitions
    )
    return dict(line.split("=", 1) for line in text.splitlines())


def test_4x_uses_a_dynamic_quorum_formatted_standalone() -> None:
    props = properties("4.2.1")
    assert props["controller.quorum.bootstrap.servers"] == "127.0.0.1:5678"
    assert "controller.quorum.voters" not in props
    assert props["num.partitions"] == "3"
    assert "--standalone" in KafkaRelease("4.2.1").format_args("id", Path("c"))
    assert KafkaRelease("4.2.1").logging(Path("/l")).jvm_flag.startswith("-Dlog4j2.")


def test_3x_uses_static_voters_without_standalone_and_log4j_1() -> None:
    props = properties("3.6.2", partitions=1)
    assert props["controller.quorum.voters"] == "1@127.0.0.1:5678"
    assert "controller.quorum.bootstrap.servers" not in props
    assert not any(key.startswith(("share.", "group.share")) for key in props)
    assert props["num.partitions"] == "1"
    assert "--standalone" not in KafkaRelease("3.9.1").format_args("id", Path("c"))
    logging = KafkaRelease("3.9.1").logging(Path("/l/server.log"))
    assert logging.jvm_flag.startswith("-Dlog4j.configuration=file:")
    assert "log4j.appender.file.File=/l/server.log" in logging.content


ARABIC_INDIC_4_2_1 = "\u0664.\u0662.\u0661"


@pytest.mark.parametrize(
    "version",
    ["", "4", "4.2", "4.2.1.0", "v4.2.1", "4.2.1 ", "../4.2.1", ARABIC_INDIC_4_2_1, "3.5.2", "2.8"],
)
def test_malformed_and_too_old_versions_are_refused(version: str) -> None:
    with pytest.raises(UnsupportedKafkaVersion):
        KafkaRelease(version)


def test_broker_settings_default_and_explicit() -> None:
    release, partitions = broker_settings_from_env({})
    assert (release.version, partitions) == ("4.2.1", 1)
    env = {"KPD_TEST_KAFKA_VERSION": " 3.9.1 ", "KPD_TEST_KAFKA_PARTITIONS": "3"}
    release, partitions = broker_settings_from_env(env)
    assert (release.version, partitions) == ("3.9.1", 3)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("KPD_TEST_KAFKA_VERSION", "latest"),
        ("KPD_TEST_KAFKA_VERSION", "4.2.1; rm -rf /"),
        ("KPD_TEST_KAFKA_VERSION", "9" * 5000),
        ("KPD_TEST_KAFKA_PARTITIONS", "0"),
        ("KPD_TEST_KAFKA_PARTITIONS", "-3"),
        ("KPD_TEST_KAFKA_PARTITIONS", "1001"),
        ("KPD_TEST_KAFKA_PARTITIONS", "3.5"),
        ("KPD_TEST_KAFKA_PARTITIONS", "²"),
        ("KPD_TEST_KAFKA_PARTITIONS", "9" * 5000),
    ],
)
def test_bad_broker_settings_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(LocalKafkaError) as error:
        broker_settings_from_env({name: value})
    assert name in str(error.value)
    assert len(str(error.value)) < 300  # hostile input is not echoed whole


def test_topic_replication_defaults_to_the_broker_default() -> None:
    assert topic_replication_from_env({}) == -1
    assert topic_replication_from_env({"KPD_TEST_TOPIC_REPLICATION": "3"}) == 3


@pytest.mark.parametrize("value", ["0", "-2", "33", "three", "1e3", "--1", "³", "9" * 5000])
def test_bad_topic_replication_is_refused(value: str) -> None:
    with pytest.raises(LocalKafkaError, match="KPD_TEST_TOPIC_REPLICATION"):
        topic_replication_from_env({"KPD_TEST_TOPIC_REPLICATION": value})
