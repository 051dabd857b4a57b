"""A folder watch (`foundation.folder_watch`) calls its listener when a file comes or goes,
from another process too, and blocks meanwhile."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from kafka_helpers import wait_for

from foundation.folder_watch import FolderWatch


def test_files_coming_and_going_wake_the_listener(tmp_path: Path) -> None:
    changes = threading.Semaphore(0)
    watch = FolderWatch(tmp_path, changes.release)
    assert watch.start()
    try:
        assert not changes.acquire(timeout=0.2)  # nothing happened: no call
        subprocess.run([sys.executable, "-c", f"open({str(tmp_path / '3.77')!r}, 'w')"], check=True)
        assert changes.acquire(timeout=5)
        (tmp_path / "3.77").unlink()
        assert changes.acquire(timeout=5)
    finally:
        watch.stop()
    wait_for(lambda: not watch._thread.is_alive(), 5, "the watch's thread ends")
