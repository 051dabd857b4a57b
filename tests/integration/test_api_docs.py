"""/docs and /redoc render in a real browser (Debian's chromium, headless) that can reach nothing
but the sidecar, as on a Kafka network without internet: their scripts come from the sidecar,
and they are open without the API token, as the OpenAPI document is."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import httpx

TOKEN = "docs-test-token"


def rendered(url: str, profile: Path) -> str:
    """The page's DOM once its scripts ran, every host but 127.0.0.1 unresolvable."""
    chromium = shutil.which("chromium")
    assert chromium, "chromium is missing: `make test` installs Debian's (apt-get install chromium)"
    done = subprocess.run(
        [
            chromium, "--headless", "--no-sandbox", "--disable-gpu",
            f"--user-data-dir={profile}",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            "--virtual-time-budget=20000", "--dump-dom", url,
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_swagger_ui_and_redoc_render_offline_without_the_token(sidecar_factory, tmp_path) -> None:
    sidecar = sidecar_factory("d", api_token=TOKEN).start()
    page = httpx.get(f"{sidecar.url}/docs", timeout=30)
    assert page.status_code == 200
    assert re.findall(r'(?:src|href)="(https?:[^"]*)"', page.text) == []  # nothing from a CDN
    assert httpx.get(f"{sidecar.url}/v1/schedules/x", timeout=30).status_code == 401

    swagger = rendered(f"{sidecar.url}/docs", tmp_path / "swagger")
    paths = set(re.findall(r'class="opblock-summary-path" data-path="([^"]+)"', swagger))
    assert {
        "/v1/topics/{topic}/messages",
        "/v1/groups/{group}/topics/{topic}/pop",
        "/v1/groups/{group}/ack",
    } <= paths

    redoc = rendered(f"{sidecar.url}/redoc", tmp_path / "redoc")
    assert re.search(r"<h1[^>]*>kpd", redoc)  # ReDoc's rendering: the page itself has no h1
    assert "/v1/groups/{group}/ack" in redoc
