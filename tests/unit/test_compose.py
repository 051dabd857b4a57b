"""docker-compose.yml must only set settings the sidecar reads, with valid values."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sidecar.config import OTHER_VARIABLES, Settings, load_settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_services(compose: dict) -> None:
    services = compose["services"]
    assert {"kafka", "sidecar-a", "sidecar-b", "audit"} <= set(services)
    assert services["kafka"]["image"].startswith("apache/kafka:4.")
    assert services["audit"]["profiles"] == ["audit"]
    for name in ("kafka", "sidecar-a", "sidecar-b"):
        assert "healthcheck" in services[name], name
    for name in ("sidecar-a", "sidecar-b"):
        assert services[name]["depends_on"]["kafka"]["condition"] == "service_healthy"


def test_two_sidecars_differ_in_node_port_and_volume(compose: dict) -> None:
    a, b = compose["services"]["sidecar-a"], compose["services"]["sidecar-b"]
    assert (a["environment"]["KPD_NODE_ID"], b["environment"]["KPD_NODE_ID"]) == ("a", "b")
    assert a["ports"] != b["ports"]
    assert a["volumes"] != b["volumes"]
    assert a["environment"]["KPD_RECEIPT_SECRET"] == b["environment"]["KPD_RECEIPT_SECRET"]


@pytest.mark.parametrize("service", ["sidecar-a", "sidecar-b"])
def test_environment_is_what_the_sidecar_reads(
    compose: dict, service: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    environment = compose["services"][service]["environment"]
    known = {f"KPD_{name.upper()}" for name in Settings.model_fields} | OTHER_VARIABLES
    assert set(environment) <= known, set(environment) - known
    monkeypatch.chdir(tmp_path)
    for name, value in environment.items():
        # ${VAR:-default} is compose interpolation: take the default.
        value = str(value)
        if value.startswith("${"):
            value = value.split(":-", 1)[1].rstrip("}")
        if value:
            monkeypatch.setenv(name, value)
    settings = load_settings()
    assert settings.bootstrap == "kafka:9092"
    assert settings.http_host == "0.0.0.0"
    port = settings.http_port
    assert any(str(p).endswith(f":{port}") for p in compose["services"][service]["ports"])
    healthcheck = " ".join(compose["services"][service]["healthcheck"]["test"])
    assert f":{port}/readyz" in healthcheck
