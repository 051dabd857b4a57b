"""Which shards the roles of other workers of a sidecar have claimed (`foundation.store_claims`),
seen from another real process, as a sibling's standby sees them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from foundation.store_claims import StoreClaims

CLAIMER = """
import sys
sys.path.insert(0, sys.argv[1])
from foundation.store_claims import StoreClaims
claims = StoreClaims(__import__("pathlib").Path(sys.argv[2]))
for line in sys.stdin:  # "+3" claims shard 3, "-3" drops the claim
    (claims.claim if line[0] == "+" else claims.unclaim)(int(line[1:]))
    print("done", flush=True)
"""


class Claimer:
    """Another worker of the sidecar, claiming shards when told."""

    def __init__(self, folder: Path) -> None:
        root = Path(__file__).resolve().parents[2]
        self.process = subprocess.Popen(
            [sys.executable, "-c", CLAIMER, str(root), str(folder)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip

    def tell(self, line: str) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        assert self.process.stdout.readline() == "done\n"


def test_another_workers_claims_are_seen_until_dropped_or_their_process_dies(
    tmp_path: Path,
) -> None:
    mine = StoreClaims(tmp_path)
    sibling = Claimer(tmp_path)
    try:
        assert mine.elsewhere() == frozenset()
        sibling.tell("+3")
        sibling.tell("+5")
        mine.claim(1)  # this process's own claims are not "elsewhere"
        assert mine.elsewhere() == {3, 5}
        sibling.tell("-3")
        assert mine.elsewhere() == {5}
        os.kill(sibling.process.pid, signal.SIGKILL)
        sibling.process.wait(10)
        # Its process died holding the claim: no longer a claim, and its file is gone.
        assert mine.elsewhere() == frozenset()
        assert sorted(p.name for p in tmp_path.iterdir()) == [f"1.{os.getpid()}"]
    finally:
        sibling.process.kill()
        sibling.process.wait(10)


def test_a_worker_starting_drops_stale_claims_and_ignores_other_files(tmp_path: Path) -> None:
    """Claims of processes gone (a worker killed while it claimed), and any of this process's
    pid from a process before it with that pid, are dropped when the claims are opened; a file
    of another form is no claim, whatever its name."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(10)
    for name in (f"2.{dead.pid}", f"4.{os.getpid()}"):
        (tmp_path / name).touch()
    live = Claimer(tmp_path)
    try:
        live.tell("+6")
        claims = StoreClaims(tmp_path)
        assert sorted(p.name for p in tmp_path.iterdir()) == [f"6.{live.process.pid}"]
        for name in ("7", "x.1", f"8.{live.process.pid}.tmp", ".9"):
            (tmp_path / name).touch()
        assert claims.elsewhere() == {6}
    finally:
        live.process.kill()
        live.process.wait(10)
