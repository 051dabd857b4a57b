"""One real local Spark for the audit tests, and a synthetic delivery log with known anomalies."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from audit_synthlog import SyntheticLog, build_log
from short_jvm import SHORT_LIVED_JVM


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from spark.audit import local_session

    conf = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.default.parallelism": "2",
        "spark.driver.extraJavaOptions": SHORT_LIVED_JVM,
    }
    # With the Kafka connector always: a machine that cannot fetch it fails here, loudly.
    session = local_session("local[2]", kafka=True, driver_memory="1g", conf=conf)
    yield session
    session.stop()


@pytest.fixture
def synthetic_log() -> SyntheticLog:
    return build_log(anomalies=True)
