"""`make compat` refuses to start without the client tools its checks run."""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools import compat


def test_missing_client_tools_stop_the_run_before_any_broker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no kcat, no node
    monkeypatch.setattr(compat, "run_release", lambda *_: pytest.fail("a broker was started"))
    assert compat.main(["--versions", "4.2.1"]) == 2
    err = capsys.readouterr().err
    assert "kcat (apt-get install kcat)" in err and "node (apt-get install nodejs)" in err
