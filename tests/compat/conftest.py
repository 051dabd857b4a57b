"""Client checks against the session broker: other clients and Kafka's own tools meet kpd.

`make compat` runs them with `KPD_TEST_KAFKA_VERSION` naming the broker release; the Java client
and `kafka-consumer-groups` come from that release's jars (any cluster: the default 4.2.1).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from kafka_helpers import wait_delivering

from devtools.broker_for_tests import broker_settings_from_env
from devtools.kafka_release import KafkaRelease
from foundation.maven import cache_root

KAFKAJS_VERSION = "2.2.4"


@pytest.fixture(scope="session")
def release() -> KafkaRelease:
    return broker_settings_from_env(os.environ)[0]


@pytest.fixture(scope="session")
def java() -> str:
    found = shutil.which("java")
    assert found, "Java 17+ is needed for the Java client checks"
    return found


@pytest.fixture(scope="session")
def kafkajs_modules() -> Path:
    """kafkajs from the npm registry, installed once into the kpd cache."""
    folder = cache_root() / f"kafkajs-{KAFKAJS_VERSION}"
    modules = folder / "node_modules"
    if not (modules / "kafkajs" / "package.json").exists():
        npm = shutil.which("npm")
        assert npm, "npm is needed for the kafkajs check (apt-get install npm)"
        folder.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            [npm, "install", "--prefix", str(folder), "--no-audit", "--no-fund",
             f"kafkajs@{KAFKAJS_VERSION}"],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-2000:]
    return modules


@pytest.fixture
def delay_sidecar(sidecar_factory, new_topic):
    """A sidecar whose delay leader already delivers (warmed up on a topic of its own)."""
    sidecar = sidecar_factory("a").start()
    with sidecar.client() as http:
        wait_delivering(http, new_topic("warm"))
    return sidecar
