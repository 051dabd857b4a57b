"""docker-compose.yml must only set settings the sidecar reads, with valid values."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from foundation.config import OTHER_VARIABLES, Settings, load_settings

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
    for name in os.environ:  # the suite's own KPD_TEST_* variables are not the sidecar's
        if name.startswith("KPD_"):
            monkeypatch.delenv(name)
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


# -- the observability profile: Prometheus and Grafana provisioned from deploy/ ----------------


def host_path(service: dict, container_path: str) -> Path:
    """The host file or folder that `service` sees at `container_path` (bind mounts only)."""
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if not source.startswith("./"):
            continue
        if container_path == target or container_path.startswith(target + "/"):
            return ROOT / source / container_path.removeprefix(target).lstrip("/")
    raise AssertionError(f"nothing is mounted at {container_path}")


def container_port(service: dict) -> int:
    [mapping] = service["ports"]
    return int(str(mapping).split(":")[-1])


def test_observability_profile_services(compose: dict) -> None:
    services = compose["services"]
    profiled = {name for name, s in services.items() if s.get("profiles") == ["observability"]}
    assert profiled == {"prometheus", "grafana"}
    assert services["prometheus"]["image"].startswith("prom/prometheus:v3.")
    assert services["grafana"]["image"].startswith("grafana/grafana:")
    for name in profiled:
        for volume in services[name]["volumes"]:
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), (name, source)
            else:
                assert source in compose["volumes"], (name, source)


def test_prometheus_scrapes_the_sidecars_and_loads_the_rules(compose: dict) -> None:
    services = compose["services"]
    prometheus = services["prometheus"]
    config = yaml.safe_load(host_path(prometheus, "/etc/prometheus/prometheus.yml").read_text())
    [job] = config["scrape_configs"]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    targets = {t for static in job["static_configs"] for t in static["targets"]}
    sidecars = {
        n for n, s in services.items() if s.get("image") == "kpd:latest" and "profiles" not in s
    }
    assert sidecars == {"sidecar-a", "sidecar-b"}
    expected = {f"{name}:{services[name]['environment']['KPD_HTTP_PORT']}" for name in sidecars}
    assert targets == expected
    [rule_file] = config["rule_files"]
    rules = yaml.safe_load(host_path(prometheus, rule_file).read_text())
    assert host_path(prometheus, rule_file) == ROOT / "deploy/prometheus/rules/kpd-alerts.yml"
    assert {r["alert"] for g in rules["groups"] for r in g["rules"]} >= {"KpdNoLeader"}


def test_grafana_is_provisioned_with_prometheus_and_the_dashboard(compose: dict) -> None:
    services = compose["services"]
    grafana = services["grafana"]
    assert "prometheus" in grafana["depends_on"]
    provisioning = host_path(grafana, "/etc/grafana/provisioning")
    [source] = yaml.safe_load((provisioning / "datasources/prometheus.yml").read_text())[
        "datasources"
    ]
    assert source["type"] == "prometheus"
    assert source["url"] == f"http://prometheus:{container_port(services['prometheus'])}"
    [provider] = yaml.safe_load((provisioning / "dashboards/kpd.yml").read_text())["providers"]
    assert provider["type"] == "file"
    dashboard_file = host_path(grafana, provider["options"]["path"]) / "kpd.json"
    assert dashboard_file == ROOT / "deploy/grafana/dashboards/kpd.json"
    dashboard = json.loads(dashboard_file.read_text())
    [variable] = dashboard["templating"]["list"]
    assert variable["current"]["value"] == source["uid"]
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert host_path(grafana, home) == dashboard_file


def test_the_image_holds_every_package() -> None:
    """The image installs the tree it copied: a package left out of the Dockerfile is missing
    from `kpd` in the image only (no Docker engine here to find out)."""
    copied = {
        line.split()[1]
        for line in (ROOT / "Dockerfile").read_text().splitlines()
        if line.startswith("COPY ") and len(line.split()) == 3
    }
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests"}
    assert packages - copied == set()
