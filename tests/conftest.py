"""Shared fixtures: one real Kafka broker per test session, unique topics, sidecar processes."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_helpers import unique, wait_for

from sidecar.broker_for_tests import broker_for_tests
from sidecar.local_sidecar import SidecarProcess, isolated_env

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    with broker_for_tests(os.environ, ROOT / ".kpd" / "test-kafka") as bootstrap:
        yield bootstrap


@pytest.fixture(scope="session")
def admin(kafka_bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_bootstrap})


@pytest.fixture
def new_topic(admin: AdminClient) -> Callable[..., str]:
    """`new_topic()` creates a topic with a unique name and returns the name."""

    def create(prefix: str = "t", partitions: int = 1, config: dict[str, str] | None = None) -> str:
        name = unique(prefix)
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})]
        )
        futures[name].result(timeout=30)
        return name

    return create


class SidecarUnderTest(SidecarProcess):
    """A real `kpd run` child process; failures to start fail the test."""

    def start(self, ready: bool = True) -> SidecarUnderTest:
        self.spawn()
        if ready:
            wait_for(self.is_ready, 60, f"sidecar {self.env['KPD_NODE_ID']} ready")
        return self

    def is_ready(self) -> bool:
        try:
            return super().is_ready()
        except RuntimeError as error:
            pytest.fail(str(error))

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30)


@pytest.fixture
def sidecar_factory(
    kafka_bootstrap: str, tmp_path: Path
) -> Iterator[Callable[..., SidecarUnderTest]]:
    """Make sidecars with their own topics (one namespace per test) and data dirs."""
    namespace = unique("kpdtest")
    started: list[SidecarUnderTest] = []

    def make(node_id: str = "a", **settings: str) -> SidecarUnderTest:
        bootstrap = settings.pop("bootstrap", kafka_bootstrap)
        env = isolated_env(bootstrap, node_id, tmp_path / node_id, namespace, **settings)
        sidecar = SidecarUnderTest(env, tmp_path / f"{node_id}.log")
        started.append(sidecar)
        return sidecar

    yield make
    for sidecar in started:
        if sidecar.running():
            sidecar.terminate(signal.SIGKILL)
