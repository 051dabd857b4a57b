"""What a CPU-second buys on this machine with one busy process, and with two side by side.

    .venv/bin/python bench/core_contention.py [--rounds 5] [--units 6000000]

kpd's CPU per record rose from 1 to 2 worker processes even with no standby (BENCHMARKS.md,
2026-11-28 09:14). If a core-second does less work while the other core is busy too (virtual
cores sharing a physical one, a shared cache, the host's other tenants), every process pays
that, kpd or not. This measures it without Kafka: the same fixed piece of Python work (objects,
dicts and bytes, as a delivery handles) timed in CPU seconds by one process alone, then by each
of two running at once, in alternating rounds. Prints each round and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time


def one_unit(i: int) -> int:
    """About what a delivery does in Python: a dict of headers, bytes joined, a tuple kept."""
    headers = {"kpd-id": f"id-{i}".encode(), "kpd-deliver-at": str(1_700_000_000_000 + i).encode()}
    key = b"|".join((headers["kpd-id"], headers["kpd-deliver-at"]))
    return len((key, headers, i)[0])


def work_cpu_s(units: int) -> float:
    """CPU seconds this process spends on `units` units of work."""
    started = time.process_time()
    total = 0
    for i in range(units):
        total += one_unit(i)
    assert total > 0
    return time.process_time() - started


def _report(units: int, out: multiprocessing.Queue) -> None:
    out.put(work_cpu_s(units))


def side_by_side(units: int, processes: int) -> list[float]:
    """Each process's CPU seconds for the same work, all started together."""
    out: multiprocessing.Queue = multiprocessing.Queue()
    running = [multiprocessing.Process(target=_report, args=(units, out)) for _ in range(processes)]
    for process in running:
        process.start()
    results = [out.get() for _ in running]
    for process in running:
        process.join()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--units", type=int, default=6_000_000)
    args = parser.parse_args()
    alone: list[float] = []
    paired: list[float] = []
    for round_no in range(1, args.rounds + 1):
        one = side_by_side(args.units, 1)
        two = side_by_side(args.units, 2)
        alone += one
        paired += two
        per_unit = ", ".join(f"{s / args.units * 1e6:.2f}" for s in two)
        print(
            f"round {round_no}: us of CPU per unit, alone {one[0] / args.units * 1e6:.2f}, "
            f"two at once {per_unit}",
            flush=True,
        )
    ratio = statistics.median(paired) / statistics.median(alone)
    print(f"median CPU per unit, two at once / alone: {ratio:.2f}")


if __name__ == "__main__":
    main()
