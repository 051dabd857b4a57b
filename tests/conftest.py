"""Shared fixtures: one real Kafka broker per test session, unique topics, sidecar processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from sidecar.broker_for_tests import broker_for_tests, free_port

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    with broker_for_tests(os.environ, ROOT / ".kpd" / "test-kafka") as bootstrap:
        yield bootstrap


@pytest.fixture(scope="session")
def admin(kafka_bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_bootstrap})


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


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


def wait_for(condition: Callable[[], object], timeout_s: float = 30.0, what: str = "") -> object:
    """Poll `condition` until it returns something truthy; fail the test after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what or condition}")
        time.sleep(0.02)


class SidecarProcess:
    """A real `kpd run` in a child process, talking HTTP on its own port."""

    def __init__(self, env: dict[str, str], port: int, data_dir: Path) -> None:
        self.env, self.port, self.data_dir = env, port, data_dir
        self.url = f"http://127.0.0.1:{port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{env['KPD_NODE_ID']}.log"

    def start(self, ready: bool = True) -> SidecarProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child process
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sidecar.cli", "run"],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.data_dir.parent,  # no kpd.toml there: settings come from env only
        )
        log.close()
        if ready:
            wait_for(self.is_ready, 60, f"sidecar {self.env['KPD_NODE_ID']} ready")
        return self

    def is_ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            pytest.fail(f"sidecar exited with {self.process.returncode}:\n{self.log()}")
        try:
            return httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    def terminate(self, sig: signal.Signals = signal.SIGTERM, timeout_s: float = 30) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout=timeout_s)

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30)


@pytest.fixture
def sidecar_factory(
    kafka_bootstrap: str, tmp_path: Path
) -> Iterator[Callable[..., SidecarProcess]]:
    """Make sidecars with their own topics (one namespace per test) and data dirs."""
    namespace = unique("kpdtest")
    started: list[SidecarProcess] = []

    def make(node_id: str = "a", **settings: str) -> SidecarProcess:
        port = free_port()
        data_dir = tmp_path / node_id
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("KPD_")},
            "KPD_BOOTSTRAP": kafka_bootstrap,
            "KPD_NODE_ID": node_id,
            "KPD_HTTP_PORT": str(port),
            "KPD_DATA_DIR": str(data_dir),
            "KPD_STATE_TOPIC_PREFIX": f"{namespace}.",
            "KPD_BUFFER_TOPIC": f"{namespace}.delay",
            "KPD_INVALID_TOPIC": f"{namespace}.invalid",
            "KPD_DELIVERY_LOG_TOPIC": f"{namespace}.delivery-log",
            **{f"KPD_{k.upper()}": v for k, v in settings.items()},
        }
        sidecar = SidecarProcess(env, port, data_dir)
        started.append(sidecar)
        return sidecar

    yield make
    for sidecar in started:
        if sidecar.process is not None and sidecar.process.poll() is None:
            sidecar.terminate(signal.SIGKILL)
