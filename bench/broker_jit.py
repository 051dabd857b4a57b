"""A fresh broker's JIT compiler, measured and waited out before a benchmark measures.

Every benchmark starts its own broker. For its first minutes under load the JVM's compiler
threads burn CPU on the paths the load makes hot: on these 2-core machines C2 alone took about
0.45 of a core for the first ~100 s of `bench/pop.py`'s batch-1 phase, pop+ack ran 53 msgs/s and
the broker spent 24 core-s per 1,000 messages; once C2 went quiet, the same load ran 93 msgs/s at
7 (BENCHMARKS.md, 2026-11-27 02:12 section). The phases measured first (kpd's, in `bench/pop.py`;
the raw loop, in `bench/delay.py`) shared the cores with the compiler while the peer measured
last did not. So a bench runs a warm-up load until the compiler threads are quiet, and prints
the compiler's CPU in every phase it measures.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from devtools.local_sidecar import broker_pid, thread_cpu_s

COMPILER_THREADS = ("C1 CompilerThre", "C2 CompilerThre")  # their names, cut to 15 characters
QUIET_CORES = 0.1  # a broker warm for the load: 0.02-0.06 of a core here, 0.3-0.5 before
WINDOW_S = 10.0


def add_argument(parser: argparse.ArgumentParser) -> None:
    """The bench's `--warm-up-s`."""
    parser.add_argument(
        "--warm-up-s",
        type=float,
        default=300,
        help="bound of the broker's JIT warm-up before the measured phases (0: none; none either "
        "with KPD_BOOTSTRAP)",
    )


def local_broker() -> int | None:
    """The broker's process when the bench started its own (`broker_for_tests`); None for one
    given by KPD_BOOTSTRAP, perhaps on another machine: its compiler is neither read nor waited
    out."""
    return None if "KPD_BOOTSTRAP" in os.environ else broker_pid()


def compiler_cpu_s(pid: int) -> float:
    """CPU seconds the JVM `pid`'s JIT compiler threads have used so far."""
    return thread_cpu_s(pid, COMPILER_THREADS)


@dataclass(frozen=True)
class WarmUp:
    seconds: float
    compiler_s: float  # the compiler's CPU during the warm-up
    last_cores: float  # the compiler's share of a core in the last window
    last_window_s: float  # at least WINDOW_S: the rounds that filled it
    settled: bool

    def text(self) -> str:
        state = "quiet" if self.settled else "NOT quiet (time bound reached)"
        return (
            f"{self.seconds:.0f} s, the compiler used {self.compiler_s:.1f} core-s; {state}: "
            f"{self.last_cores:.2f} of a core in the last {self.last_window_s:.0f} s"
        )


def warm_up(pid: int, one_round: Callable[[], object], max_s: float) -> WarmUp:
    """Run `one_round` again and again until, over a window of at least WINDOW_S, the broker's
    compiler threads used less than QUIET_CORES of a core, or `max_s` passed."""
    start, compiled0 = time.monotonic(), compiler_cpu_s(pid)
    while True:
        window0, window_compiled0 = time.monotonic(), compiler_cpu_s(pid)
        while time.monotonic() - window0 < WINDOW_S:
            one_round()
        window_s = time.monotonic() - window0
        cores = (compiler_cpu_s(pid) - window_compiled0) / window_s
        settled = cores < QUIET_CORES
        if settled or time.monotonic() - start >= max_s:
            compiled = compiler_cpu_s(pid) - compiled0
            return WarmUp(time.monotonic() - start, compiled, cores, window_s, settled)


class CompilerMeter:
    """The broker's compiler CPU from now on, for a phase's line (`pid` None: not measured)."""

    def __init__(self, pid: int | None) -> None:
        self._pid = pid
        self._start = compiler_cpu_s(pid) if pid is not None else 0.0

    def text(self) -> str:
        if self._pid is None:
            return "the broker's JIT compiler not measured (KPD_BOOTSTRAP)"
        used = compiler_cpu_s(self._pid) - self._start
        return f"the broker's JIT compiler used {used:.1f} core-s"


def with_compiler_cpu(pid: int | None, phase: Callable[[], str]) -> str:
    """`phase()`'s line, followed by the broker's compiler CPU while it ran."""
    meter = CompilerMeter(pid)
    line = phase()
    return f"{line}; {meter.text()}"
