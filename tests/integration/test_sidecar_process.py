"""`kpd run` as a real process: topics, health endpoints, readiness and graceful shutdown."""

from __future__ import annotations

import signal
import time
from email.utils import parsedate_to_datetime
from pathlib import Path

import httpx
from confluent_kafka.admin import AdminClient
from kafka_helpers import wait_for
from load_helpers import readiness, ready

from devtools.broker_for_tests import free_port
from devtools.local_kafka import LocalKafka


def test_creates_missing_topics_and_serves_health(sidecar_factory, admin: AdminClient) -> None:
    sidecar = sidecar_factory("a").start()
    topics = admin.list_topics(timeout=10).topics
    for name in ("KPD_BUFFER_TOPIC", "KPD_INVALID_TOPIC", "KPD_DELIVERY_LOG_TOPIC"):
        assert sidecar.env[name] in topics
    with sidecar.client() as http:
        assert http.get("/healthz").json() == {"status": "ok"}
        ready = http.get("/readyz")
        assert ready.status_code == 200 and ready.json()["node"] == "a"
        metrics = http.get("/metrics")
        assert "kpd_kafka_reachable 1.0" in metrics.text
        missing = http.get("/nope")
        assert missing.status_code == 404
        assert missing.headers["content-type"] == "application/problem+json"
        assert missing.json()["code"] == "not_found"


def test_answers_carry_the_date_they_were_made_after_the_server_sat_idle(sidecar_factory) -> None:
    """The server renews its Date header as requests come, not on a tick of its own: an answer
    after a second and more without a request still carries its own second."""
    sidecar = sidecar_factory("a").start()
    with sidecar.client() as http:
        for path in ("/healthz", "/readyz", "/healthz"):  # the lean path and FastAPI's
            time.sleep(1.5)  # idle, on purpose: nothing to await
            asked = int(time.time())
            date = parsedate_to_datetime(http.get(path).headers["date"]).timestamp()
            assert asked <= date <= time.time(), (path, asked, date)


def test_once_ready_a_lone_sidecar_stays_ready(sidecar_factory) -> None:
    """Readiness waits for the roles of the shards just assigned: a sidecar was ready for a
    moment between its assignment and their start, then unready while they started."""
    sidecar = sidecar_factory("a").start(ready=False)
    wait_for(lambda: ready(sidecar.url), 60, "ready")  # probed every 20 ms from the start
    with sidecar.client() as http:
        answers = [http.get("/readyz") for _ in range(300)]  # about 2 s of probes, back to back
    assert [(a.status_code, a.text) for a in answers if a.status_code != 200] == []


def test_sigterm_stops_cleanly_and_frees_the_port(sidecar_factory) -> None:
    sidecar = sidecar_factory("a").start()
    assert sidecar.terminate(signal.SIGTERM, timeout_s=20) == 0
    assert "sidecar stopped" in sidecar.log()
    try:
        httpx.get(f"{sidecar.url}/healthz", timeout=1)
        raise AssertionError("the HTTP port still answers after SIGTERM")
    except httpx.ConnectError:
        pass
    # No stray process: nothing else carries this sidecar's data dir on its command line or env.
    assert sidecar.process is not None and sidecar.process.poll() == 0


def test_sigint_also_stops_cleanly(sidecar_factory) -> None:
    sidecar = sidecar_factory("b").start()
    assert sidecar.terminate(signal.SIGINT, timeout_s=20) == 0


def test_readiness_follows_the_broker(sidecar_factory, tmp_path: Path) -> None:
    """Readiness goes false when Kafka stops and true again when it returns.

    Each probe opens its own connection, as orchestrators' probes do: when the broker returns,
    a worker whose long-lived clients stay wedged restarts itself (`sidecar.self_heal`), which
    drops the connections it held; the probe must then reach the fresh worker."""
    broker = LocalKafka(home=tmp_path / "own-kafka", port=free_port())
    bootstrap = broker.start()
    try:
        sidecar = sidecar_factory("r", bootstrap=bootstrap).start()
        assert ready(sidecar.url)
        broker.stop()
        wait_for(lambda: "kafka unreachable" in readiness(sidecar.url), 30, "not ready")
        unready = httpx.get(f"{sidecar.url}/readyz", timeout=5)
        assert unready.status_code == 503 and unready.json()["code"] == "not_ready"
        assert httpx.get(f"{sidecar.url}/healthz", timeout=5).status_code == 200  # alive
        broker.start()
        wait_for(lambda: ready(sidecar.url), 60, "ready again")
    finally:
        broker.stop()


def test_bad_setting_exits_with_a_clear_message(sidecar_factory) -> None:
    sidecar = sidecar_factory("bad", http_port="99999")
    sidecar.start(ready=False)
    assert sidecar.process is not None
    assert sidecar.process.wait(timeout=30) == 2
    assert "invalid setting KPD_HTTP_PORT" in sidecar.log()
