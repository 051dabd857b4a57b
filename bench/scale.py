"""Scale-out benchmark: worker processes, failover by kill, takeover against pop-state size.

    .venv/bin/python bench/scale.py                       # local broker under a temp folder
    .venv/bin/python bench/scale.py --workers 1,2 --kills 10 --pop-state 10000,1000000

Prints, in one run on one broker, after uncounted raw loops and mixed phases (`bench/delay.py`)
have run until the fresh broker's JIT compiler is quiet (`bench/broker_jit.py`, `--warm-up-s`):
  * for 1, 2 and 4 worker processes of one `kpd run` (8 shards): delay ingest (schedules/s),
    burst drain (deliveries/s) and pop+ack at batch 100 (msgs/s), as ratios to 1 worker (the
    latest 1-worker run: `--workers 1,2,1,2` pairs); the CPU split (each kpd process, with its
    librdkafka threads' part, their standbys' part, the broker, and the machine's steal,
    core-seconds per 1,000 records, and the cores the machine left idle, which one worker more
    could have used; the burst's from its due instant on, the wait before it apart) and each
    worker's share of the work (from the delivery log's `node`); the burst's delay commits;
    and the fixed cost: each process's CPU over 10 s with nothing to do, after the pop phase;
  * failover: SIGKILL of a sidecar under a steady due load, 2 sidecars with the broker's stock
    session timeout (6 s): time until the killed sidecar's shards deliver again, p50 and max;
  * takeover: the time from SIGKILL of a pop leader to the first pop answered by its standby,
    with 10k and with 1M records already in the pop-state topic; and with 1 and 100 groups
    holding leases (`--takeover-groups`), until every group's first pop.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
from confluent_kafka.admin import AdminClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # before bench/: `revive` is kpd's package, not bench/revive.py

from bench import broker_jit  # noqa: E402
from bench.cpu_cap import CpuCaps  # noqa: E402
from bench.delay_phases import warm_up_broker  # noqa: E402
from bench.scale_failover import failover, takeover  # noqa: E402
from bench.scale_parts import (  # noqa: E402
    SETTLE_S,
    SHARDS,
    Fleet,
    Sidecar,
    kpd_setting,
    number_list,
)
from bench.scale_phases import delay_and_pop  # noqa: E402
from devtools.broker_for_tests import broker_for_tests  # noqa: E402
from devtools.local_sidecar import broker_pid, process_cpu_s  # noqa: E402

IDLE_S = 10.0  # how long the processes are watched doing nothing, for their fixed cost


def _idle(sidecar: Sidecar, broker: int) -> tuple[list[float], float]:
    """What each worker process and the broker burn over IDLE_S with nothing to do, in cores."""
    cpu0, broker0 = sidecar.cpu(), process_cpu_s(broker)
    time.sleep(IDLE_S)
    workers = [
        (c - cpu0.get(p, (0.0, 0.0))[0]) / IDLE_S for p, (c, _) in sorted(sidecar.cpu().items())
    ]
    return workers, (process_cpu_s(broker) - broker0) / IDLE_S


def one_run(
    bootstrap: str,
    admin: AdminClient,
    workers: int,
    n: int,
    home: Path,
    caps: CpuCaps,
    **settings: str,
) -> dict:
    namespace = f"bench-scale-{uuid.uuid4().hex[:6]}"
    folder = home / f"w{workers}-{namespace}"  # `--workers 1,2,1,2` runs 1 worker twice
    sidecar = Sidecar(bootstrap, folder, namespace, "s", workers=str(workers), **settings)
    sidecar.launch(timeout_s=300)
    broker = broker_pid()
    result: dict = {"workers": workers}
    try:
        if caps.cores:
            for pid in sidecar.worker_pids():
                caps.cap(pid)
        # The fixed cost of a fresh sidecar: every shard led and followed, nothing to do.
        time.sleep(SETTLE_S)
        result["idle_fresh"], result["idle_fresh_broker"] = _idle(sidecar, broker)
        result |= delay_and_pop(Fleet([sidecar]), bootstrap, admin, n, broker)
        # The fixed cost again, once a group is read.
        result["idle"], result["idle_broker"] = _idle(sidecar, broker)
        result["throttled_s"] = caps.throttled_s()
    finally:
        sidecar.stop()
        caps.release()
    return result


# -- main --------------------------------------------------------------------------------------


def run(bootstrap: str, args: argparse.Namespace) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    home = Path(tempfile.mkdtemp(prefix="kpd-bench-scale-"))
    print(f"broker {bootstrap}; files in {home}; {os.cpu_count()} cores")
    broker = broker_pid()
    if args.warm_up_s > 0:  # or the 1-worker run, the base of every ratio, shares the cores with it
        warm_up_broker(bootstrap, admin, home / "warm-up", SHARDS, broker, args.warm_up_s)
    base: dict = {}
    for workers in args.workers:
        jit = broker_jit.CompilerMeter(broker)
        caps = CpuCaps(args.worker_cpu, int(args.cpu_period_ms * 1000))
        r = one_run(bootstrap, admin, workers, args.n, home, caps, **args.setting)
        # Ratios are to the latest 1-worker run: this machine's speed drifts by up to a fifth
        # within minutes, so `--workers 1,2,1,2` gives pairs measured close together.
        base = r if workers == 1 or not base else base
        at = time.strftime("%H:%M:%S", time.gmtime())
        load = os.getloadavg()[0]
        print(
            f"\n== {workers} worker(s), {SHARDS} shards, {at} UTC, load {load:.1f}, "
            f"settings {args.setting}; {jit.text()}",
            flush=True,
        )
        if args.worker_cpu:
            print(
                f"  each worker capped at {args.worker_cpu} cores per {args.cpu_period_ms} ms: "
                f"held back {r['throttled_s']:.1f} s in all by its cap",
                flush=True,
            )
        for name in ("ingest", "burst", "pop"):
            print(
                f"{name:7s} {r[name]:>10,.0f}/s  x{r[name] / base[name]:.2f} of 1 worker  "
                f"cpu {r[name + '_cpu']}  shares {dict(r[name + '_share'])}",
                flush=True,
            )
        print(f"  the burst's wait before its due time: cpu {r['burst_wait_cpu']}", flush=True)
        print(f"  the burst's delay commits: {r['burst_commits']} each", flush=True)
        print(f"  pop calls forwarded to another worker: {r['pop_forwarded']}", flush=True)
        per = ", ".join(f"{call} {count:.1f}" for call, count in r["pop_calls"].items())
        print(f"  calls a shard's leader answered per 1,000 messages: {per}", flush=True)
        for when, key in (("before the ingest", "idle_fresh"), ("after the pop phase", "idle")):
            idle = " + ".join(f"{c:.3f}" for c in r[key])
            print(
                f"  idle for {IDLE_S:.0f} s {when}: kpd {idle} = {sum(r[key]):.3f}, "
                f"broker {r[key + '_broker']:.3f} cores",
                flush=True,
            )
        if not r["burst_valid"]:
            print("  !! the burst was not all scheduled before its due time", flush=True)
    if args.kills:
        times = failover(bootstrap, admin, args.kills, home, args.failover_workers)
        print(
            f"\nfailover after SIGKILL ({len(times)} kills, {args.failover_workers} worker(s) "
            "per sidecar, stock 6 s session; until every shard of the killed one delivered): p50 "
            f"{np.percentile(times, 50):.2f} s, max {max(times):.2f} s; all {times}"
        )
    for records in args.pop_state:
        first, _, _, cold = takeover(bootstrap, admin, records, home)
        print(
            f"takeover with {records:,} pop-state records: {first:.2f} s to the standby's "
            f"first pop (the first leader's cold start: {cold:.1f} s)"
        )
    for groups in args.takeover_groups:
        first, median, last, _ = takeover(bootstrap, admin, 10_000, home, groups)
        print(
            f"takeover with {groups} groups holding leases: {first:.2f} s to the first group's "
            f"first pop, {median:.2f} s to the median group's, {last:.2f} s until every group "
            "had one (each group long-polling)"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=number_list, default=[1, 2, 4])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--pop-state", type=number_list, default=[10_000, 1_000_000])
    parser.add_argument("--takeover-groups", type=number_list, default=[1, 100])
    parser.add_argument("--failover-workers", type=int, default=1, help="workers per sidecar")
    broker_jit.add_argument(parser)
    parser.add_argument(
        "--worker-cpu",
        type=float,
        default=0.0,
        metavar="CORES",
        help="cap each worker process at this many cores (a cgroup each; root): what a worker "
        "adds where the machine has CPU left for it (bench/cpu_cap.py)",
    )
    parser.add_argument(
        "--cpu-period-ms",
        type=float,
        default=100.0,
        metavar="MS",
        help="the caps' period (default the kernel's 100 ms): a capped worker runs its share of "
        "each period, then waits for the next",
    )
    parser.add_argument(
        "--set",
        dest="setting",
        type=kpd_setting,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a kpd setting for the 1/2/4-worker runs, e.g. standby_schedules=next",
    )
    args = parser.parse_args()
    args.setting = dict(args.setting)
    home = ROOT / ".kpd" / "bench-kafka"
    with broker_for_tests(os.environ, home) as bootstrap:
        run(bootstrap, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
