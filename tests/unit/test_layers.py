"""Lower layers never import higher ones (README: layout).

foundation <- delay_service, revive <- cluster (membership, failover, cross-shard routing) <- api
(HTTP) <- sidecar (the composition root). The SDK
imports nothing of the server, and the server never imports the developer tooling, the audit or
the SDK: only the `kpd` command (kpd_cli) brings them together.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KPD_PACKAGES = {
    "foundation",
    "delay_service",
    "revive",
    "api",
    "cluster",
    "sidecar",
    "kpd_cli",
    "kpd_client",
    "devtools",
    "spark",
}
# What each package may import of kpd (itself always).
ALLOWED = {
    "foundation": set(),
    "delay_service": {"foundation"},
    "revive": {"foundation"},
    "api": {"foundation", "delay_service", "revive", "cluster"},
    "cluster": {"foundation", "delay_service", "revive"},
    "sidecar": {"foundation", "delay_service", "revive", "api", "cluster"},
    "kpd_cli": {"foundation", "sidecar", "kpd_client", "devtools", "spark"},
    "kpd_client": set(),
    "devtools": {"foundation"},
    "spark": {"foundation"},
}


def kpd_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found.update(name.split(".")[0] for name in names if name.split(".")[0] in KPD_PACKAGES)
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_lower_layers(package: str) -> None:
    violations = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        wrong = kpd_imports(path) - ALLOWED[package] - {package}
        if wrong:
            violations[str(path.relative_to(ROOT))] = sorted(wrong)
    assert not violations, f"{package} imports layers above it: {violations}"


def test_every_package_has_a_rule() -> None:
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert packages - {"tests"} == KPD_PACKAGES


def test_callers_use_the_pop_service_face_not_its_parts() -> None:
    """Outside `revive`, a pop service is used through its methods (lease, settle, reads,
    available, ...), never through its inbox or fetchers."""
    parts = {"inbox", "_inbox", "fetchers", "_fetchers"}
    reaching = sorted(
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for package in ("api", "cluster", "sidecar")
        for path in sorted((ROOT / package).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr in parts
    )
    assert reaching == []
