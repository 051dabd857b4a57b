"""`StartedWorkers`: a sidecar of several workers is ready only once each has been ready."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.workers import MULTIPROCESS, StartedWorkers


def test_ready_only_once_every_worker_has_been(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(MULTIPROCESS, str(tmp_path))
    first, second = StartedWorkers(0, 2), StartedWorkers(1, 2)
    assert first.not_started(ready_here=False) == 2
    assert first.not_started(ready_here=True) == 1
    assert second.not_started(ready_here=False) == 1, "the first one's mark is shared"
    assert second.not_started(ready_here=True) == 0
    assert first.not_started(ready_here=False) == 0, "a worker once ready stays counted"
    assert StartedWorkers(0, 2).not_started(ready_here=True) == 0, "a restarted one counts once"


def test_one_worker_never_waits_for_others(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(MULTIPROCESS, str(tmp_path))
    assert StartedWorkers(0, 1).not_started(ready_here=False) == 0
    assert list(tmp_path.iterdir()) == []
