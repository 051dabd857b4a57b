"""Python calls per record in kpd's workers, 1 against 2 worker processes.

    .venv/bin/python bench/burst_calls.py --workers 1,2 --worker-cpu 0.25

In `bench/scale.py` kpd's CPU seconds per delivered record rose from 1 to 2 capped workers in
every run, while on this virtual machine the same Python work costs a CPU-second more or less
from one minute to the next. Calls counted do not vary
so: if two workers make more calls per record than one, kpd does more work per record; if not,
the rise is in what each call costs. For each worker count, one `kpd run` on one broker, each
worker's threads under cProfile (`bench/call_counting/`), the phases of `bench/scale.py`: ingest
of n schedules, a burst of n due at one instant (from once they are scheduled to the last
delivery), pop+ack of n at batch 100. Printed: each phase's Python calls per record (all workers
together; those the idle rate makes over the phase's length apart), and the functions whose
calls per record changed most between the worker counts. The rates and CPU printed are under
the profiler, so slower than `bench/scale.py`'s; a phase in which a worker so slowed was taken
for silent and its shards moved is flagged (their work was redone).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import orjson
from confluent_kafka.admin import AdminClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import scale_parts as parts  # noqa: E402
from bench.cpu_cap import CpuCaps  # noqa: E402
from bench.delay_load import (  # noqa: E402
    create_target,
    create_topic,
    now_ms,
    produce_fast,
    read_deliveries,
)
from devtools.broker_for_tests import broker_for_tests  # noqa: E402

IDLE_S = 10.0
# A worker the profiler slows may be taken for silent and its shards moved: their work is redone.
TAKEOVERS = "kpd_early_takeovers_total"
PHASES = ("ingest", "burst", "pop")
TOP = 25


def calls(sidecar: parts.Sidecar, folder: Path) -> Counter[str]:
    """Every worker's calls so far, by function, summed (each worker writes them on SIGUSR2)."""
    total: Counter[str] = Counter()
    for pid in sidecar.worker_pids():
        written = folder / f"{pid}.json"
        written.unlink(missing_ok=True)
        os.kill(pid, signal.SIGUSR2)
        deadline = time.monotonic() + 60
        while not written.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"worker {pid} wrote no counts within 60 s")
            time.sleep(0.05)
        total.update(orjson.loads(written.read_bytes()))
    return total


def _workers_cpu(sidecar: parts.Sidecar) -> float:
    return sum(cpu for cpu, _ in sidecar.cpu().values())


class Phase:
    """Calls and worker CPU from `start` to `end`, per record."""

    def __init__(self, sidecar: parts.Sidecar, folder: Path) -> None:
        self._sidecar, self._folder = sidecar, folder
        self._takeovers = sidecar.metrics().get(TAKEOVERS, 0.0)
        self._calls, self._cpu, self._at = (
            calls(sidecar, folder),
            _workers_cpu(sidecar),
            time.monotonic(),
        )

    def end(self, records: int, idle_per_s: float) -> dict:
        cpu, seconds = _workers_cpu(self._sidecar) - self._cpu, time.monotonic() - self._at
        made = calls(self._sidecar, self._folder) - self._calls
        return {
            "takeovers": self._sidecar.metrics().get(TAKEOVERS, 0.0) - self._takeovers,
            "per_record": Counter({f: c / records for f, c in made.items()}),
            "idle": idle_per_s * seconds / records,
            "cpu_per_k": cpu * 1000 / records,
            "seconds": seconds,
        }


def one_run(
    bootstrap: str,
    admin: AdminClient,
    workers: int,
    n: int,
    home: Path,
    caps: CpuCaps,
    **settings: str,
) -> dict:
    folder = home / f"calls-{workers}"
    folder.mkdir()
    namespace = f"bench-calls-{uuid.uuid4().hex[:6]}"
    sidecar = parts.Sidecar(
        bootstrap, home / f"w{workers}", namespace, "s", workers=str(workers), **settings
    )
    sidecar.env |= {
        "PYTHONPATH": str(ROOT / "bench" / "call_counting"),
        "BENCH_CALLS_DIR": str(folder),
    }
    sidecar.launch(timeout_s=300)
    try:
        if caps.cores:
            for pid in sidecar.worker_pids():
                caps.cap(pid)
        time.sleep(parts.SETTLE_S)
        idle = Phase(sidecar, folder)
        time.sleep(IDLE_S)
        idle_per_s = sum(idle.end(1, 0.0)["per_record"].values()) / IDLE_S
        buffer, log = sidecar.env["KPD_BUFFER_TOPIC"], sidecar.env["KPD_DELIVERY_LOG_TOPIC"]
        target = create_topic(admin, f"bench-calls-t-{uuid.uuid4().hex[:6]}")
        ingest = Phase(sidecar, folder)
        produce_fast(bootstrap, buffer, parts.schedules(target, "i", n, now_ms() + 3_600_000))
        rate = parts.LogCount(bootstrap, log, "scheduled", target, n, 600).rate()
        result = {"idle_per_s": idle_per_s, "ingest": ingest.end(n, idle_per_s)}
        burst_target = create_target(admin, f"bench-calls-b-{uuid.uuid4().hex[:6]}")
        due = now_ms() + int(n / rate * 1500) + 8_000
        produce_fast(bootstrap, buffer, parts.schedules(burst_target, "b", n, due))
        scheduled = parts.LogCount(bootstrap, log, "scheduled", burst_target, n, 600)
        if scheduled.count != n or scheduled.last_ms >= due:
            raise RuntimeError("the burst was not all scheduled before its due time")
        # From before the due instant: the workers write their counts in turn, and with the
        # snapshot taken at it 4 workers had begun the drain (a phase of 2.4 s, 15:37 UTC).
        burst = Phase(sidecar, folder)
        time.sleep(max(due - now_ms(), 0) / 1000)
        rows = read_deliveries(bootstrap, burst_target, n, 600)
        if len(rows) != n:
            raise RuntimeError(f"{len(rows)} of {n} delivered")
        result["burst"] = burst.end(n, idle_per_s)
        # Pop + ack at batch 100 from 4 client processes, over the shared port.
        topic = create_topic(admin, f"bench-calls-p-{uuid.uuid4().hex[:6]}", parts.SHARDS)
        produce_fast(bootstrap, topic, ((f"p-{i}".encode(), []) for i in range(n)))
        group = f"g-{uuid.uuid4().hex[:6]}"
        n_pop = n - parts.warm_up(sidecar.url, group, topic)
        pop = Phase(sidecar, folder)
        acked, _ = parts.pop_and_ack([sidecar.url], group, topic, n_pop)
        if acked != n_pop:
            raise RuntimeError(f"{acked} of {n_pop} acked")
        result["pop"] = pop.end(acked, idle_per_s)
        for phase in PHASES:  # for a closer look than the report's
            (home / f"calls-{workers}-{phase}.json").write_bytes(
                orjson.dumps(result[phase]["per_record"])
            )
    finally:
        sidecar.stop()
        caps.release()
    return result


def report(runs: dict[int, dict]) -> None:
    base_workers = min(runs)
    for phase in PHASES:
        print(
            f"\n== {phase}: Python calls per record, all workers (idle rate over the phase apart)"
        )
        for workers, r in sorted(runs.items()):
            p = r[phase]
            python = sum(c for f, c in p["per_record"].items() if ".py:" in f)
            print(
                f"  {workers} worker(s): {sum(p['per_record'].values()):8.1f} calls/record "
                f"({python:.1f} of Python functions), the idle rate over the phase's "
                f"{p['seconds']:.1f} s {p['idle']:.1f}; profiled CPU {p['cpu_per_k']:.3f} core-s/1k"
            )
            if p["takeovers"]:
                print(f"    !! {p['takeovers']:.0f} early takeovers in the phase: work redone")
        base = runs[base_workers][phase]["per_record"]
        for workers, r in sorted(runs.items()):
            if workers == base_workers:
                continue
            other = r[phase]["per_record"]
            change = {f: other[f] - base[f] for f in base.keys() | other.keys() if ".py:" in f}
            print(
                f"  the {TOP} Python functions whose calls/record moved most, "
                f"{base_workers} -> {workers} workers:"
            )
            for f in sorted(change, key=lambda f: -abs(change[f]))[:TOP]:
                print(f"    {base[f]:8.2f} -> {other[f]:8.2f}  {f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=parts.number_list, default=[1, 2])
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument(
        "--worker-cpu",
        type=float,
        default=0.0,
        metavar="CORES",
        help="cap each worker at this many cores (bench/cpu_cap.py; root)",
    )
    parser.add_argument(
        "--set",
        dest="setting",
        type=parts.kpd_setting,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a kpd setting for every run, e.g. standby_schedules=next",
    )
    args = parser.parse_args()
    with broker_for_tests(os.environ, ROOT / ".kpd" / "bench-kafka") as bootstrap:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        home = Path(tempfile.mkdtemp(prefix="kpd-bench-calls-"))
        print(f"broker {bootstrap}; files in {home}; {os.cpu_count()} cores", flush=True)
        runs = {}
        for workers in args.workers:
            runs[workers] = one_run(
                bootstrap,
                admin,
                workers,
                args.n,
                home,
                CpuCaps(args.worker_cpu),
                **dict(args.setting),
            )
            print(
                f"{workers} worker(s) done at {time.strftime('%H:%M:%S', time.gmtime())} UTC",
                flush=True,
            )
        report(runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
