"""Which Kafka should a test run use? Shared by the pytest fixture and the benchmarks.

Order (issue #2): an existing cluster named by `KPD_BOOTSTRAP`; else a Docker engine, if one
answers, running testcontainers' Kafka (KRaft); else the local broker of `kpd kafka start`.
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from enum import Enum
from pathlib import Path

from sidecar.local_kafka import LocalKafka

KAFKA_IMAGE = "apache/kafka:4.2.1"


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


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def broker_for_tests(env: Mapping[str, str], local_home: Path) -> Iterator[str]:
    """Yield a bootstrap address for the chosen source; stop what was started here."""
    source = choose_broker_source(env, docker_reachable)
    if source is BrokerSource.ENV:
        yield env["KPD_BOOTSTRAP"].strip()
    elif source is BrokerSource.DOCKER:
        from testcontainers.community.kafka import KafkaContainer

        with KafkaContainer(KAFKA_IMAGE).with_kraft() as container:
            yield container.get_bootstrap_server()
    else:
        # One folder per test session (by pid), so parallel sessions never touch each other's
        # broker; folders of sessions that died are stopped and removed first.
        for stale in local_home.glob("session-*"):
            if not Path(f"/proc/{stale.name.removeprefix('session-')}").exists():
                LocalKafka(home=stale).stop()
                shutil.rmtree(stale, ignore_errors=True)
        broker = LocalKafka(home=local_home / f"session-{os.getpid()}", port=free_port())
        try:
            yield broker.start()
        finally:
            broker.stop()
            broker.wipe()
