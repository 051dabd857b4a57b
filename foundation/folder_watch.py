"""Told at once when files come and go in a folder (Linux inotify), by a thread that blocks.

The workers of a sidecar share a folder of store claims (`foundation.store_claims`); a claim
one makes must reach its siblings' conductors without their looking for it on a period. Where
inotify is not there (not Linux), `start` says so and the caller keeps its own bound.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import threading
from collections.abc import Callable
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

IN_CREATE, IN_DELETE, IN_MOVED_FROM, IN_MOVED_TO = 0x100, 0x200, 0x40, 0x80
IN_CLOEXEC = 0o2000000


class FolderWatch:
    def __init__(self, folder: Path, changed: Callable[[], None]) -> None:
        self._folder, self._changed = folder, changed
        self._fd: int | None = None
        self._wake_r, self._wake_w = os.pipe()  # ends the thread's wait (a stop)
        self._thread = threading.Thread(target=self._run, name="folder watch", daemon=True)

    def start(self) -> bool:
        """Watch the folder from now on; False if inotify is not available here."""
        libc_name = ctypes.util.find_library("c")
        try:
            libc = ctypes.CDLL(libc_name, use_errno=True)
            fd = libc.inotify_init1(IN_CLOEXEC)
        except (OSError, AttributeError):
            return False
        if fd < 0:
            return False
        mask = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO
        if libc.inotify_add_watch(fd, str(self._folder).encode(), mask) < 0:
            os.close(fd)
            return False
        self._fd = fd
        self._thread.start()
        return True

    def stop(self) -> None:
        os.write(self._wake_w, b"x")
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        for fd in (self._fd, self._wake_r, self._wake_w):
            if fd is not None:
                os.close(fd)

    def _run(self) -> None:
        assert self._fd is not None
        while True:
            ready, _, _ = select.select([self._fd, self._wake_r], [], [])
            if self._wake_r in ready:
                return
            os.read(self._fd, 65_536)  # the events themselves: any change is news
            try:
                self._changed()
            except Exception:
                log.exception("a folder watch's listener failed", folder=str(self._folder))
