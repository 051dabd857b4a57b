"""Caps processes at a share of the machine's CPU with Linux cgroups (needs root).

`bench/scale.py --worker-cpu C` puts each kpd worker process in a cgroup of its own limited to C
cores. On a machine where one uncapped worker and the broker already take every core, adding a
worker cannot add throughput; with each worker capped low enough that the broker and the bench's
clients keep CPU to spare, the run shows what a worker adds where the machine has CPU left for it.
"""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path

V1 = Path("/sys/fs/cgroup/cpu")  # cgroup v1: cpu.cfs_quota_us / cpu.cfs_period_us
V2 = Path("/sys/fs/cgroup")  # cgroup v2 (unified): cpu.max = "<quota> <period>"
PERIOD_US = 100_000  # the kernel's default period


class CpuCaps:
    """One cgroup per capped process, each limited to `cores` per `period_us`; `release` moves
    them back. Within a period a process may run `cores * period_us`, then waits for the next
    one: with the default period a request that comes once its worker's quota is spent waits up
    to 75 ms at a quarter of a core (a shorter period makes that wait shorter)."""

    def __init__(self, cores: float, period_us: int = PERIOD_US) -> None:
        self.cores, self._period_us = cores, period_us
        self._groups: list[Path] = []
        self._v1 = (V1 / "cpu.cfs_quota_us").exists()
        self._root = V1 if self._v1 else V2

    def cap(self, pid: int) -> None:
        group = self._root / f"kpd-bench-{uuid.uuid4().hex[:8]}"
        group.mkdir()
        self._groups.append(group)
        quota = int(self.cores * self._period_us)
        if self._v1:
            (group / "cpu.cfs_period_us").write_text(str(self._period_us))
            (group / "cpu.cfs_quota_us").write_text(str(quota))
        else:
            (group / "cpu.max").write_text(f"{quota} {self._period_us}")
        (group / "cgroup.procs").write_text(str(pid))  # every thread of the process moves

    def throttled_s(self) -> float:
        """How long the capped processes were held back by their caps, summed."""
        total_ns = 0
        for group in self._groups:
            stat = dict(line.split() for line in (group / "cpu.stat").read_text().splitlines())
            if self._v1:
                total_ns += int(stat["throttled_time"])
            else:
                total_ns += int(stat["throttled_usec"]) * 1000
        return total_ns / 1e9

    def release(self) -> None:
        for group in self._groups:
            for pid in (group / "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                    (self._root / "cgroup.procs").write_text(pid)
            group.rmdir()
        self._groups.clear()
