"""The OpenAPI document matches the server: schemathesis against a real sidecar.

Every check runs (status codes, media types, response schemas and headers, server errors, auth,
unsupported methods, negative data) except `positive_data_acceptance`: the schema cannot state
every rule that refuses a well-typed message (value and value_b64 together, a delay beyond the
configured maximum, a record over the size limit: 413). Before this document listed its error
answers, the same run found 16 failures (undocumented statuses and media types).
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Producer
from kafka_helpers import metric_values, wait_for

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
OPERATIONS = 15
POPPABLE = 50_000  # enough that no pop of the run waits for messages
TOKEN = "t0ken-for-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_the_document_declares_problems_security_and_metrics(sidecar_factory):
    sidecar = sidecar_factory("a", api_token=TOKEN).start()
    spec = httpx.get(f"{sidecar.url}/openapi.json").json()
    assert spec["components"]["securitySchemes"] == {
        "bearerAuth": {"type": "http", "scheme": "bearer"}
    }
    codes = spec["components"]["schemas"]["Problem"]["properties"]["code"]["enum"]
    assert {"unauthorized", "request_too_large", "leader_starting", "kpd_topic"} <= set(codes)
    assert set(spec["paths"]["/metrics"]["get"]["responses"]["200"]["content"]) == {"text/plain"}
    pop = spec["paths"]["/v1/groups/{group}/topics/{topic}/pop"]["post"]
    assert pop["security"] == [{"bearerAuth": []}]
    for status in ("400", "401", "403", "404", "413", "422", "503"):
        assert set(pop["responses"][status]["content"]) == {"application/problem+json"}, status
    assert "Retry-After" in pop["responses"]["503"]["headers"]
    assert "security" not in spec["paths"]["/healthz"]["get"]


def _seeded_config(sidecar, kafka_bootstrap: str, topic: str, path: Path) -> list[str]:
    """Real data for the calls that need it: messages to pop (one group, one topic) and a
    delivered schedule (GET 200, DELETE 409); the schemathesis options that point at them."""
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 50})
    for i in range(POPPABLE):
        producer.produce(topic, str(i).encode())
        producer.poll(0)
    assert producer.flush(30) == 0
    schedule_id = "conformance-delivered"
    with sidecar.client() as http:
        http.headers.update(AUTH)
        message = {"value": "due now", "delay_ms": 0, "id": schedule_id}
        http.post(f"/v1/topics/{topic}/messages", json={"messages": [message]})

        def delivered() -> bool:
            return http.get(f"/v1/schedules/{schedule_id}").json().get("state") == "delivered"

        wait_for(delivered, 30, "the schedule delivered")
    path.write_text(
        "[[operations]]\n"
        'include-path = "/v1/groups/{group}/topics/{topic}/pop"\n'
        f'parameters = {{ group = "conformance", topic = "{topic}" }}\n'
        "[[operations]]\n"
        'include-path-regex = "^/v1/schedules/"\n'
        f'parameters = {{ schedule_id = "{schedule_id}" }}\n'
    )
    return ["--config-file", str(path)]


@pytest.mark.parametrize(
    "token,seeded", [(None, False), (TOKEN, True)], ids=["no-token-random", "token-seeded"]
)
def test_the_server_conforms_to_its_document(
    sidecar_factory, new_topic, kafka_bootstrap, tmp_path, token, seeded
):
    """Without data every call is exercised with generated (mostly unknown) names and ids; with
    data, pops lease real messages and the schedule calls hit a real schedule."""
    sidecar = sidecar_factory("a", **({"api_token": token} if token else {})).start()
    options = []
    if seeded:
        options = _seeded_config(sidecar, kafka_bootstrap, new_topic(), tmp_path / "st.toml")
    junit = tmp_path / "junit.xml"
    command = [
        str(SCHEMATHESIS), *options, "run", f"{sidecar.url}/openapi.json",
        "--checks", "all", "--exclude-checks", "positive_data_acceptance",
        "--max-examples", "20", "--generation-deterministic", "--workers", "1",
        "--request-timeout", "30", "--no-color",
        "--report", "junit", "--report-junit-path", str(junit),
    ]  # fmt: skip
    if token:
        command += ["--header", f"Authorization: Bearer {token}"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-2000:]
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("failures"), suite.get("errors")) == ("0", "0"), run.stdout[-8000:]
    spec = httpx.get(f"{sidecar.url}/openapi.json").json()
    operations = {f"{m.upper()} {p}" for p, ops in spec["paths"].items() for m in ops}
    assert len(operations) == OPERATIONS
    assert {case.get("name") for case in suite} == operations | {"Stateful tests"}
    assert all(len(case) == 0 for case in suite)  # no <failure> or <error> in any case
    if seeded:  # pops answered with real messages, whose schema was checked too
        with sidecar.client() as http:
            assert metric_values(http)["kpd_pop_messages_total"] > 0
