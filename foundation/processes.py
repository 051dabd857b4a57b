"""Facts about other processes of this machine."""

from __future__ import annotations

import os
from pathlib import Path


def alive(pid: int) -> bool:
    """Does process `pid` run (a process of another user counts; a zombie does not)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); treat it as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False
