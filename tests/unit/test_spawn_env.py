"""A sidecar started by the dev tools runs the code of the tree that started it
(`devtools.local_sidecar.spawn_env`), not the code the venv's editable install points at."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import devtools
from devtools.local_sidecar import spawn_env

TREE = Path(devtools.__file__).resolve().parents[1]


def test_the_child_imports_kpd_from_this_tree_whatever_the_cwd(tmp_path: Path) -> None:
    shadow = tmp_path / "other-checkout" / "api"  # a package of the same name elsewhere
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    env = spawn_env({**os.environ, "PYTHONPATH": str(shadow.parent)})
    found = subprocess.run(
        [sys.executable, "-c", "import api; print(api.__file__)"],
        env=env, cwd=tmp_path, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert Path(found).resolve() == TREE / "api" / "__init__.py"


def test_a_pythonpath_given_is_kept_after_the_tree() -> None:
    env = spawn_env({"PYTHONPATH": "/bench/call_counting", "KPD_NODE_ID": "a"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(TREE), "/bench/call_counting"]
    assert env["KPD_NODE_ID"] == "a"
    assert spawn_env({})["PYTHONPATH"] == str(TREE)
