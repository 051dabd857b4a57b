"""Run a benchmark on the broker the tests would use (`devtools.broker_for_tests`): the cluster
named by KPD_BOOTSTRAP, or a local broker of its own under .kpd/bench-kafka, stopped after."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

from devtools.broker_for_tests import broker_for_tests

BENCH_KAFKA = Path(__file__).resolve().parent.parent / ".kpd" / "bench-kafka"


def on_broker(run: Callable[[str, argparse.Namespace], None], args: argparse.Namespace) -> int:
    """`run(bootstrap, args)`; the exit code of the script."""
    with broker_for_tests(os.environ, BENCH_KAFKA) as bootstrap:
        run(bootstrap, args)
    return 0
