"""`kpd kafka start|stop|status` on a broker of its own (not the session broker)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from devtools.broker_for_tests import free_port
from devtools.kafka_release import KafkaRelease
from devtools.local_kafka import LocalKafka, LocalKafkaError


def kpd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kpd_cli", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env or dict(os.environ),
    )


@pytest.fixture
def broker_dir(tmp_path: Path) -> Iterator[list[str]]:
    args = ["--dir", str(tmp_path / "kafka"), "--port", str(free_port())]
    yield args
    kpd("kafka", "stop", *args)


def test_start_stop_status_are_idempotent(broker_dir: list[str]) -> None:
    assert kpd("kafka", "status", *broker_dir).returncode == 3

    first = kpd("kafka", "start", *broker_dir)
    assert first.returncode == 0, first.stderr
    assert "started at 127.0.0.1:" in first.stdout
    bootstrap = first.stdout.split(" at ")[1].strip()
    assert AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers

    second = kpd("kafka", "start", *broker_dir)
    assert second.returncode == 0 and "already running" in second.stdout
    pids = subprocess.run(["pgrep", "-f", broker_dir[1]], capture_output=True, text=True)
    assert len(pids.stdout.split()) == 1, "starting twice must leave exactly one broker"

    status = kpd("kafka", "status", *broker_dir)
    assert status.returncode == 0 and bootstrap in status.stdout

    stopped = kpd("kafka", "stop", *broker_dir)
    assert stopped.returncode == 0 and "kafka stopped" in stopped.stdout
    assert subprocess.run(["pgrep", "-f", broker_dir[1]]).returncode == 1
    again = kpd("kafka", "stop", *broker_dir)
    assert again.returncode == 0 and "not running" in again.stdout
    assert kpd("kafka", "status", *broker_dir).returncode == 3


def test_port_taken_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        result = kpd("kafka", "start", "--dir", str(tmp_path / "k"), "--port", str(port))
    assert result.returncode == 2
    assert f"port {port}" in result.stderr and "taken" in result.stderr


def test_missing_java_is_a_clear_error(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}  # nothing on PATH
    result = kpd(
        "kafka", "start", "--dir", str(tmp_path / "k"), "--port", str(free_port()), env=env
    )
    assert result.returncode == 2
    assert "Java is not on PATH" in result.stderr


def test_missing_maven_is_a_clear_error(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    java = shutil.which("java")
    assert java is not None
    (bin_dir / "java").symlink_to(java)
    env = {**os.environ, "PATH": str(bin_dir), "KPD_CACHE_DIR": str(tmp_path / "empty-cache")}
    result = kpd(
        "kafka", "start", "--dir", str(tmp_path / "k"), "--port", str(free_port()), env=env
    )
    assert result.returncode == 2
    assert "Maven (mvn) is not on PATH" in result.stderr


def test_a_3x_release_runs_with_its_partitions_and_keeps_its_folder(tmp_path: Path) -> None:
    """3.x differs in quorum keys and logging; topics take the configured num.partitions."""
    home = tmp_path / "kafka-3"
    broker = LocalKafka(home=home, port=free_port(), release=KafkaRelease("3.6.2"), partitions=3)
    try:
        admin = AdminClient({"bootstrap.servers": broker.start()})
        admin.create_topics([NewTopic("defaults", -1, -1)])["defaults"].result(timeout=30)
        metadata = admin.list_topics("defaults", timeout=10).topics["defaults"]
        assert sorted(metadata.partitions) == [0, 1, 2]
        assert "Kafka Server started" in broker.log_file.read_text()  # log4j 1 logs to the file
    finally:
        broker.stop()
    with pytest.raises(LocalKafkaError, match=r"holds a Kafka 3\.6\.2 broker, not 4\.2\.1"):
        LocalKafka(home=home, port=free_port()).start()
    broker.wipe()
