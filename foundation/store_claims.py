"""The shards whose stores a worker of this sidecar has claimed for a role.

RocksDB's LOCK file says that another process holds a shard's store, not why: a sibling's
standby keeping the shard, which may let it go, or a sibling's delay role, which must keep it.
So a delay role taking its shard claims it first (an empty file `<shard>.<pid>` in the sidecar's
claims folder) and drops the claim once it has let the store go. A standby keeps no shard
another live worker of the sidecar claims: it lets go of such a store at its worker's next
reconcile, and does not take it back while the role runs. Before claims, a standby let go only
once its view of the group showed the move, which an early takeover comes before by the group's
session: SIGKILL of a sidecar of two workers took 5.2-8.8 s to deliver again in 4 of 10 kills.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from foundation.folder_watch import FolderWatch
from foundation.processes import alive


class StoreClaims:
    def __init__(self, folder: Path) -> None:
        self._folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        for path in folder.iterdir():  # claims of processes gone, or of this pid's last owner
            shard_pid = _parsed(path.name)
            if shard_pid is None or shard_pid[1] == os.getpid() or not alive(shard_pid[1]):
                path.unlink(missing_ok=True)

    def on_change(self, changed: Callable[[], None]) -> FolderWatch | None:
        """Call `changed` whenever a claim comes or goes, from now on; the watch to stop (None:
        no inotify here)."""
        watch = FolderWatch(self._folder, changed)
        return watch if watch.start() else None

    def claim(self, shard: int) -> None:
        (self._folder / f"{shard}.{os.getpid()}").touch()

    def unclaim(self, shard: int) -> None:
        (self._folder / f"{shard}.{os.getpid()}").unlink(missing_ok=True)

    def elsewhere(self) -> frozenset[int]:
        """The shards that other live processes of the sidecar claim."""
        found = set()
        for path in self._folder.iterdir():
            shard_pid = _parsed(path.name)
            if shard_pid is None or shard_pid[1] == os.getpid():
                continue
            if alive(shard_pid[1]):
                found.add(shard_pid[0])
            else:  # its process died holding it (SIGKILL)
                path.unlink(missing_ok=True)
        return frozenset(found)


def _parsed(name: str) -> tuple[int, int] | None:
    """`<shard>.<pid>` -> (shard, pid); None for a name of another form."""
    shard, _, pid = name.partition(".")
    return (int(shard), int(pid)) if shard.isdigit() and pid.isdigit() else None
