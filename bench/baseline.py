"""A module as an earlier commit had it, to measure today's code against it in the same process."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def module_at(commit: str, path: str) -> types.ModuleType:
    """`path` (a module file of this repository) as of `commit`, compiled into a module of its
    own; its imports resolve to today's modules."""
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{commit}:{path}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    name = f"{Path(path).stem}_at_{commit[:7]}"
    module = types.ModuleType(name)
    sys.modules[name] = module  # where msgspec and dataclasses look up a class's annotations
    exec(compile(source, f"{name}.py", "exec"), module.__dict__)
    return module
