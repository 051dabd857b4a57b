"""`observe_all` leaves a histogram as one `observe` per amount would, in one process and in
prometheus_client's multiprocess mode (chosen when the library is imported: a child each)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# At, between, below and beyond the bounds; +Inf's bucket; a repeated value.
AMOUNTS = [0.001, 0.0015, -1.0, 0.0, 0.002, 0.002, 60.0, 60.0001, 1e9, 0.3]
CHILD = """
import json, sys
from prometheus_client import Histogram
from foundation.metrics import observe_all
buckets = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
one_by_one = Histogram("one_by_one", "d", buckets=buckets)
all_at_once = Histogram("all_at_once", "d", buckets=buckets)
amounts = json.loads(sys.argv[1])
for amount in amounts:
    one_by_one.observe(amount)
observe_all(all_at_once, amounts)
observe_all(all_at_once, [])
def samples(histogram):
    return sorted(
        (s.name.rsplit("_", 1)[-1], s.labels.get("le", ""), s.value)
        for s in histogram.collect()[0].samples
        if not s.name.endswith("_created")
    )
print(json.dumps([samples(one_by_one), samples(all_at_once)]))
"""


@pytest.mark.parametrize("multiprocess", [False, True])
def test_observe_all_matches_one_observe_per_amount(multiprocess: bool, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    if multiprocess:
        env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(AMOUNTS)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    one_by_one, all_at_once = json.loads(out)
    assert all_at_once == one_by_one
    by_kind = {(kind, le): value for kind, le, value in all_at_once}
    assert by_kind[("count", "")] == len(AMOUNTS)
    assert by_kind[("sum", "")] == pytest.approx(sum(AMOUNTS))
    # Cumulative buckets: -1.0, 0.0 and 0.001 are <= 0.001; the two above 60 only in +Inf.
    assert by_kind[("bucket", "0.001")] == 3
    assert by_kind[("bucket", "60.0")] == len(AMOUNTS) - 2
    assert by_kind[("bucket", "+Inf")] == len(AMOUNTS)
    assert bool(list(tmp_path.iterdir())) == multiprocess  # the mode the child ran in
