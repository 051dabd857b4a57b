"""Which Kafka should a test run use? Shared by the pytest fixture and the benchmarks.

Order (issue #2): an existing cluster named by `KPD_BOOTSTRAP`; else a Docker engine, if one
answers, running testcontainers' Kafka (KRaft); else the local broker of `kpd kafka start`.
The broker started here runs the release `KPD_TEST_KAFKA_VERSION` (default 4.2.1) with
`KPD_TEST_KAFKA_PARTITIONS` (default 1) as its `num.partitions`.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from enum import Enum
from pathlib import Path

from devtools.kafka_release import DEFAULT_VERSION, KafkaRelease, UnsupportedKafkaVersion
from devtools.local_kafka import LocalKafka, LocalKafkaError

MAX_PARTITIONS = 1000


class BrokerSource(Enum):
    ENV = "env"
    DOCKER = "docker"
    LOCAL = "local"


def docker_reachable() -> bool:
    """A missing engine fails within milliseconds, so this is cheap to ask."""
    try:
        import docker

        docker.from_env(timeout=2).ping()
    except Exception:  # no client library, no socket, no permission: all mean "no Docker"
        return False
    return True


def choose_broker_source(
    env: Mapping[str, str], docker_available: Callable[[], bool]
) -> BrokerSource:
    if env.get("KPD_BOOTSTRAP", "").strip():
        return BrokerSource.ENV
    if docker_available():
        return BrokerSource.DOCKER
    return BrokerSource.LOCAL


def broker_settings_from_env(env: Mapping[str, str]) -> tuple[KafkaRelease, int]:
    """(release, num.partitions) of the broker to start; a bad value names its variable."""
    version = env.get("KPD_TEST_KAFKA_VERSION", "").strip() or DEFAULT_VERSION
    try:
        release = KafkaRelease(version)
    except UnsupportedKafkaVersion as error:
        raise LocalKafkaError(f"KPD_TEST_KAFKA_VERSION: {error}") from None
    raw = env.get("KPD_TEST_KAFKA_PARTITIONS", "").strip() or "1"
    if not _small_ascii_number(raw) or not 1 <= int(raw) <= MAX_PARTITIONS:
        raise LocalKafkaError(
            f"KPD_TEST_KAFKA_PARTITIONS must be a whole number 1..{MAX_PARTITIONS}, "
            f"got {raw[:40]!r}"
        )
    return release, int(raw)


def topic_replication_from_env(env: Mapping[str, str]) -> int:
    """Replication factor of test topics: `KPD_TEST_TOPIC_REPLICATION`, else -1 (the broker's
    default, so a cluster that requires 3 replicas gets 3)."""
    raw = env.get("KPD_TEST_TOPIC_REPLICATION", "").strip() or "-1"
    if raw != "-1" and not (_small_ascii_number(raw) and 1 <= int(raw) <= 32):
        raise LocalKafkaError(f"KPD_TEST_TOPIC_REPLICATION must be -1 or 1..32, got {raw[:40]!r}")
    return int(raw)


def _small_ascii_number(raw: str) -> bool:
    return len(raw) <= 6 and raw.isascii() and raw.isdigit()


# Ports are picked below the kernel's ephemeral range (outgoing connections take their local
# ports from it): a port picked there can be taken by an outgoing connection before the sidecar
# worker it is for binds it (EADDRINUSE), as a port the kernel hands out on a bind to port 0 is
# from that range.
LOWEST_PORT = 10_000
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def free_port() -> int:
    """A port free now, from below the ephemeral range where there is room."""
    try:
        ephemeral_low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = LOWEST_PORT
    if ephemeral_low - 1 > LOWEST_PORT:  # room below it
        for _ in range(100):
            port = random.randrange(LOWEST_PORT, ephemeral_low - 1)  # its next one too (pairs)
            if _bindable(port):
                return port
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _bindable(port: int) -> bool:
    try:
        with socket.create_server(("127.0.0.1", port)):
            return True
    except OSError:
        return False


@contextmanager
def broker_for_tests(env: Mapping[str, str], local_home: Path) -> Iterator[str]:
    """Yield a bootstrap address for the chosen source; stop what was started here."""
    source = choose_broker_source(env, docker_reachable)
    if source is BrokerSource.ENV:
        yield env["KPD_BOOTSTRAP"].strip()
        return
    release, partitions = broker_settings_from_env(env)
    if source is BrokerSource.DOCKER:
        from testcontainers.community.kafka import KafkaContainer

        image = f"apache/kafka:{release.version}"
        container = KafkaContainer(image).with_kraft()
        with container.with_env("KAFKA_NUM_PARTITIONS", str(partitions)) as running:
            yield running.get_bootstrap_server()
    else:
        # One folder per test session (by pid), so parallel sessions never touch each other's
        # broker; folders of sessions that died are stopped and removed first.
        for stale in local_home.glob("session-*"):
            if not Path(f"/proc/{stale.name.removeprefix('session-')}").exists():
                LocalKafka(home=stale).stop()
                shutil.rmtree(stale, ignore_errors=True)
        broker = LocalKafka(
            home=local_home / f"session-{os.getpid()}",
            port=free_port(),
            release=release,
            partitions=partitions,
        )
        try:
            yield broker.start()
        finally:
            broker.stop()
            broker.wipe()
