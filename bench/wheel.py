"""Benchmark of the delay service's timing wheel: today's design against the one it replaced.

    .venv/bin/python bench/wheel.py                     # 100k and 1M entries
    .venv/bin/python bench/wheel.py --sizes 100000 --rounds 5

Baseline: `delay_service/timing_wheel.py` as of commit d1fecfe (one GC-tracked `_Entry` object per
pending schedule), read with `git show` into a throwaway module, so both run in the same process
on the same ids.  For each size N, with N entries due at seeded random milliseconds of a 10 s
window and the default 1 ms tick:
  * add: N adds into an empty wheel;
  * advance: the clock moved 1 ms at a time over the window (10,000 calls), entries returned/s;
  * remove: N removes in random order from a populated wheel;
  * burst: N entries due in the same millisecond, drained with limit=2000 (the leader's batch);
  * gc.collect(): a full collection with the wheel populated, and just before populating it,
    fastest of 7 (the rest of the process is the workload's lists and the interpreter itself);
  * GC-tracked objects the populated wheel added (`len(gc.get_objects())` after/before);
  * memory: tracemalloc peak while populating, per entry (the ids exist beforehand: both designs
    share them with the caller).
All times are CPU time of this process (`time.process_time`), which other processes on a shared
machine disturb less than wall time; rates are the best of --rounds rounds, the two designs
alternating.  The collector runs with its default thresholds (as the sidecar will once its
threshold workaround is dropped) unless --gc-threshold sets others.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import time
import tracemalloc
import types
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.baseline import module_at  # noqa: E402
from delay_service import timing_wheel  # noqa: E402

BASELINE_COMMIT = "d1fecfe0aca3ea8b917a82965948fa6c9ac0d39f"
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
WINDOW_MS = 10_000
BURST_LIMIT = 2_000  # delay_service.leader.BATCH: deliveries per transaction


class Workload:
    """Ids and due times shared by both designs: the same N entries over the 10 s window."""

    def __init__(self, n: int, seed: int = 1) -> None:
        rng = random.Random(seed)
        self.ids = [f"{i:026d}" for i in range(n)]  # ULID-sized schedule ids
        self.dues = [START_MS + rng.randrange(1, WINDOW_MS + 1) for _ in range(n)]
        self.removal_order = self.ids[:]
        rng.shuffle(self.removal_order)

    def populate(self, module: types.ModuleType) -> object:
        timer = module.TimingWheelTimer(START_MS)
        for schedule_id, due in zip(self.ids, self.dues, strict=True):
            timer.add(schedule_id, due)
        return timer


def timed(action: Callable[[], int]) -> float:
    """Run ``action`` (which returns how many operations it did); operations per second."""
    gc.collect()  # the baseline's entries form cycles: leave no garbage of a previous run
    t0 = time.process_time()
    count = action()
    return count / (time.process_time() - t0)


def add_rate(module: types.ModuleType, load: Workload) -> float:
    return timed(lambda: len(load.populate(module)))


def advance_rate(module: types.ModuleType, load: Workload) -> float:
    timer = load.populate(module)

    def run() -> int:
        fired = 0
        for now in range(START_MS + 1, START_MS + WINDOW_MS + 1):
            fired += len(timer.advance(now))
        assert fired == len(load.ids) and len(timer) == 0
        return fired

    return timed(run)


def remove_rate(module: types.ModuleType, load: Workload) -> float:
    timer = load.populate(module)

    def run() -> int:
        removed = sum(timer.remove(schedule_id) for schedule_id in load.removal_order)
        assert removed == len(load.ids) and len(timer) == 0
        return removed

    return timed(run)


def burst_rate(module: types.ModuleType, load: Workload) -> float:
    timer = module.TimingWheelTimer(START_MS)
    due = START_MS + WINDOW_MS
    for schedule_id in load.ids:
        timer.add(schedule_id, due)

    def run() -> int:
        drained = 0
        while chunk := timer.advance(due, limit=BURST_LIMIT):
            drained += len(chunk)
        assert drained == len(load.ids)
        return drained

    return timed(run)


def collect_ms() -> float:
    """Fastest of 7 full collections, CPU ms."""
    gc.collect()  # the first one also untracks tuples of atoms: time the steady state
    samples = []
    for _ in range(7):
        t0 = time.process_time()
        gc.collect()
        samples.append((time.process_time() - t0) * 1000)
    return min(samples)


def gc_figures(module: types.ModuleType, load: Workload) -> tuple[float, float, int]:
    """(full collection ms before populating, with the wheel populated, tracked objects added)."""
    gc.collect()
    before = len(gc.get_objects())
    without = collect_ms()
    timer = load.populate(module)
    gc.collect()
    tracked = len(gc.get_objects()) - before
    with_wheel = collect_ms()
    assert len(timer) == len(load.ids)
    return without, with_wheel, tracked


def peak_bytes_per_entry(module: types.ModuleType, load: Workload) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        timer = load.populate(module)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(timer) == len(load.ids)
    return peak / len(load.ids)


RATES = {
    "add": add_rate,
    "advance (1 ms steps)": advance_rate,
    "remove": remove_rate,
    f"burst drain (limit {BURST_LIMIT})": burst_rate,
}


def bench_size(n: int, designs: dict[str, types.ModuleType], rounds: int) -> None:
    load = Workload(n)
    print(f"\n== {n:,} entries due over {WINDOW_MS // 1000} s, 1 ms tick ==")
    for label, measure in RATES.items():
        samples: dict[str, list[float]] = {name: [] for name in designs}
        for _ in range(rounds):
            for name, module in designs.items():
                samples[name].append(measure(module, load))
        rates = {name: max(values) for name, values in samples.items()}
        cells = "  ".join(f"{name} {rate:>12,.0f}/s" for name, rate in rates.items())
        print(f"{label:<26} {cells}  new/old {rates['new'] / rates['old']:.2f}")
    for name, module in designs.items():
        without, with_wheel, tracked = gc_figures(module, load)
        print(
            f"gc.collect() {name}  {with_wheel:6.1f} ms with the wheel, {without:.1f} ms without "
            f"({with_wheel - without:+.1f}); GC-tracked objects it added: {tracked:,}"
        )
    for name, module in designs.items():
        print(f"peak memory  {name}  {peak_bytes_per_entry(module, load):6.0f} B/entry")


def positive(text: str) -> int:
    value = int(text)
    if not 0 < value <= 10**8:
        raise argparse.ArgumentTypeError(f"{text} is not in 1..10^8")
    return value


def counts(text: str) -> list[int]:
    return [positive(part) for part in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes", type=counts, default="100000,1000000", help="comma-separated entry counts"
    )
    parser.add_argument("--rounds", type=positive, default=3, help="timing rounds (best one)")
    parser.add_argument(
        "--gc-threshold",
        type=counts,
        help="gc.set_threshold values, e.g. 100000,50,100 (the sidecar's until 2026-11-25)",
    )
    args = parser.parse_args()
    if args.gc_threshold:
        if len(args.gc_threshold) != 3:
            parser.error("--gc-threshold takes three numbers")
        gc.set_threshold(*args.gc_threshold)
    sizes = args.sizes
    designs = {
        "old": module_at(BASELINE_COMMIT, "delay_service/timing_wheel.py"),
        "new": timing_wheel,
    }
    print(
        f"python {sys.version.split()[0]}, gc thresholds {gc.get_threshold()}, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    for n in sizes:
        bench_size(n, designs, args.rounds)
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
