"""CPU per message against the number of sidecars: one `kpd run`, then two of one deployment.

    .venv/bin/python bench/sidecars.py                    # 1 then 2 sidecars, 1 worker each
    .venv/bin/python bench/sidecars.py --sidecars 1,2,1,2 --workers 2 --n 50000

The phases of `bench/scale.py` (delay ingest, a burst drain, pop+ack at batch 100 from 4 client
processes) on one broker, 8 shards, first with one sidecar, then with the shards spread over
two, the clients taking turns between their ports. A call that reaches a sidecar which does not
lead its shard is sent on over HTTP: what that costs is what this measures. Printed per phase:
the rate, kpd's CPU per 1,000 records (all workers of all sidecars) and its ratio to the latest
one-sidecar run (target: at most 1.2x), the calls sent on, and who did the work.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # before bench/: `revive` is kpd's package, not bench/revive.py

from bench import broker_jit  # noqa: E402
from bench.delay_phases import warm_up_broker  # noqa: E402
from bench.runs import on_broker  # noqa: E402
from bench.scale_parts import SETTLE_S, SHARDS, Fleet, Sidecar, number_list  # noqa: E402
from bench.scale_phases import delay_and_pop  # noqa: E402
from devtools.local_sidecar import broker_pid  # noqa: E402

PHASES = ("ingest", "burst", "pop")
SPREAD_S = 120.0  # for the shards to be led by every sidecar


def spread(fleet: Fleet) -> None:
    """Wait until every shard is led, and every sidecar leads some."""
    deadline = time.monotonic() + SPREAD_S
    while time.monotonic() < deadline:
        led = [sidecar.led() for sidecar in fleet.sidecars]
        if all(led) and set().union(*led) == set(range(SHARDS)):
            return
        time.sleep(0.5)
    raise TimeoutError(f"shards not spread over the sidecars within {SPREAD_S:.0f} s: {led}")


def one_run(bootstrap: str, admin: AdminClient, count: int, args: argparse.Namespace) -> dict:
    namespace = f"bench-sidecars-{uuid.uuid4().hex[:6]}"
    home = Path(tempfile.mkdtemp(prefix=f"kpd-bench-sidecars-{count}-"))
    fleet = Fleet(
        [
            Sidecar(bootstrap, home, namespace, f"s{i}", workers=str(args.workers))
            for i in range(count)
        ]
    )
    try:
        for sidecar in fleet.sidecars:
            sidecar.launch(timeout_s=300)
        spread(fleet)
        time.sleep(SETTLE_S)
        return delay_and_pop(fleet, bootstrap, admin, args.n, broker_pid())
    finally:
        for sidecar in fleet.sidecars:
            sidecar.stop()


def run(bootstrap: str, args: argparse.Namespace) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    print(f"broker {bootstrap}; {os.cpu_count()} cores; {args.n:,} records a phase", flush=True)
    if args.warm_up_s > 0:
        home = Path(tempfile.mkdtemp(prefix="kpd-bench-sidecars-warm-"))
        warm_up_broker(bootstrap, admin, home, SHARDS, broker_pid(), args.warm_up_s)
    base: dict = {}
    for count in args.sidecars:
        r = one_run(bootstrap, admin, count, args)
        base = r if count == 1 or not base else base  # ratios to the latest one-sidecar run
        at = time.strftime("%H:%M:%S", time.gmtime())
        print(f"\n== {count} sidecar(s) of {args.workers} worker(s), {at} UTC", flush=True)
        for phase in PHASES:
            ratio = r[f"{phase}_kpd"] / base[f"{phase}_kpd"]
            print(
                f"{phase:7s} {r[phase]:>10,.0f}/s  kpd {r[f'{phase}_kpd']:.3f} core-s/1k = "
                f"x{ratio:.2f} of 1 sidecar  cpu {r[f'{phase}_cpu']}  "
                f"shares {dict(r[f'{phase}_share'])}",
                flush=True,
            )
        print(f"  pop calls sent on to another worker: {r['pop_forwarded']}", flush=True)
        per = ", ".join(f"{call} {n:.1f}" for call, n in r["pop_calls"].items())
        print(f"  calls a shard's leader answered per 1,000 messages: {per}", flush=True)
        if not r["burst_valid"]:
            print("  !! the burst was not all scheduled before its due time", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sidecars", type=number_list, default=[1, 2])
    parser.add_argument("--workers", type=int, default=1, help="workers per sidecar")
    parser.add_argument("--n", type=int, default=50_000, help="records per phase")
    broker_jit.add_argument(parser)
    return on_broker(run, parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
