"""Benchmark of kpd pop consumption against raw Kafka consume and a Kafka share group.

    .venv/bin/python bench/pop.py                      # local broker under .kpd/bench-kafka
    KPD_BOOTSTRAP=127.0.0.1:9092 .venv/bin/python bench/pop.py --records 100000

One run, one broker, one `kpd run` process (real Kafka, real HTTP), one pre-produced topic of
`--records` records (100-byte value, 16-byte key, 3 partitions), printing:
  1. raw confluent-kafka consume throughput of that topic (one consumer, the physical reference);
  2. kpd pop+ack throughput over HTTP with batches of 1, 10, 100 and 1000: `--procs` client
     processes running `--clients` concurrent clients between them (one each by default), each
     a pop -> ack loop with httpx, one fresh pop group per batch size (so every
     batch size starts from the whole backlog); msgs/s acked, the client-side pop / ack round
     trips under that load, and the CPU split (below);
  3. pop latency p50/p99 with messages waiting: one client, sequential pops of 1 and 10 (each
     followed by an untimed ack), on a fresh group of the same topic, and the sidecar's garbage
     collections meanwhile (`bench/gc_pauses.py`);
  4. produce-to-pop latency with long poll: a pop parked with wait_ms 20000, then one record
     produced (linger.ms 0); latency = answer received - the record's CreateTime;
  5. a Kafka share group (KIP-932, confluent-kafka ShareConsumer, explicit acknowledgement, each
     record ACCEPTed) with the same number of processes and max.poll.records = batch size (best
     effort in librdkafka: the observed mean poll size is printed), acknowledgements sent by
     commit_async, or by commit_sync every batch. A share group hands a member its partitions
     only on a heartbeat (5 s apart), so members that join a second apart can leave part of the
     backlog waiting seconds for one of them: each phase first lets every member receive a
     warm-up record, and its backlog (the same size and shape, on a topic of its own) is written
     in one transaction that commits only then (the group reads read_committed), so the rate
     counts from the moment the whole backlog became visible to a settled group.
Before phase 2, uncounted rounds of pop+ack at batch 10 run until the fresh broker's JIT compiler
is quiet (`bench/broker_jit.py`; bounded by `--warm-up-s`), so that kpd's phases, which come
first, do not share the cores with it while the share group's, which come last, do not.
Throughput phases (2 and 5) print their CPU split: core-seconds per 1,000 records of the sidecar
(supervisor and worker), the broker (and of that its JIT compiler) and the client processes, all
on the same cores, since on a small machine what the clients and the broker burn is what kpd
cannot have. Every phase is bounded
in count (`--records`) and time (`--phase-s`). With `--profile-s N` and py-spy installed, an extra
(uncounted) batch-100 run is profiled for N s and the top frames of the worker's pop threads are
printed. The parts: `bench/pop_load.py` (backlog, sidecar, clients, CPU meter),
`bench/pop_phases.py` (kpd's phases), `bench/share_groups.py` (the share-group peer).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import broker_jit  # noqa: E402
from bench.delay_load import create_topic  # noqa: E402
from bench.pop_load import (  # noqa: E402
    PARTITIONS,
    VALUE_BYTES,
    Sidecar,
    add_leases_argument,
    produce_backlog,
    raw_consume,
)
from bench.pop_phases import (  # noqa: E402
    kpd_throughput,
    pop_latency,
    produce_to_pop,
    profile_sidecar,
)
from bench.runs import on_broker  # noqa: E402
from bench.share_groups import SHARE_BATCHES, share_throughput  # noqa: E402

BATCHES = (1, 10, 100, 1000)


# -- report ----------------------------------------------------------------------------------


def run(bootstrap: str, args: argparse.Namespace) -> None:
    ctx = mp.get_context("spawn")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    home = Path(tempfile.mkdtemp(prefix="kpd-bench-pop-"))
    load_start = os.getloadavg()
    print(f"broker {bootstrap}; sidecar files in {home}; load average at start {load_start}")
    topic = create_topic(admin, f"bench-pop-{uuid.uuid4().hex[:6]}", PARTITIONS)
    rate, _ = produce_backlog(bootstrap, topic, args.records)
    print(
        f"backlog: {args.records:,} records of {VALUE_BYTES} B value + 16 B key on {topic} "
        f"({PARTITIONS} partitions), produced at {rate:,.0f}/s"
    )

    raw_n, raw_rate = raw_consume(bootstrap, topic, args.records, args.phase_s)
    print(f"1. raw consume: {raw_n:,} records at {raw_rate:,.0f} msgs/s")

    sidecar = Sidecar(bootstrap, home, args.leases)
    kpd: dict[int, dict] = {}
    latency: list[dict] = []
    p2p: dict = {}
    profile: list[str] = []
    try:
        print(f"sidecar ready in {sidecar.start():.1f} s at {sidecar.url}")
        warm_text = "none (--warm-up-s 0, or KPD_BOOTSTRAP)"
        broker = broker_jit.local_broker()
        if args.warm_up_s > 0 and broker is not None:
            warm = broker_jit.warm_up(
                broker,
                lambda: kpd_throughput(ctx, sidecar, topic, 10, args.procs, args.records, 10),
                args.warm_up_s,
            )
            warm_text = f"kpd pop+ack at batch 10, not counted: {warm.text()}"
        print(f"broker warm-up: {warm_text}", flush=True)
        for batch in BATCHES:
            r = kpd_throughput(
                ctx, sidecar, topic, batch, args.procs, args.records, args.phase_s,
                clients=max(args.clients // args.procs, 1),
            )  # fmt: skip
            kpd[batch] = r
            print(
                f"2. kpd pop+ack batch {batch:>4}, {clients_text(args)}: "
                f"{r['acked']:,} acked in {r['seconds']:.1f} s "
                f"= {r['rate']:,.0f} msgs/s; sidecar CPU {r['sidecar_cpu']:.0%} of one core; "
                f"pop p50/p99 {r['pop_p50']:.1f}/{r['pop_p99']:.1f} ms, "
                f"ack p50/p99 {r['ack_p50']:.1f}/{r['ack_p99']:.1f} ms under load; "
                f"CPU {cpu_text(r['cpu_per_1k'])}, of which GC {r['gc_s_per_1k']:.4f} "
                f"({r['gc']}); not acked {r['not_acked']}; errors {r['errors']}",
                flush=True,
            )
        for batch in (1, 10):
            r = pop_latency(sidecar, topic, batch, args.latency_pops, args.phase_s)
            latency.append(r)
            print(
                f"3. pop latency batch {batch:>2} (1 client, messages waiting, {r['n']} pops): "
                f"p50 {r['p50']:.2f} ms, p99 {r['p99']:.2f} ms, max {r['max']:.1f} ms "
                f"(its ack p50/p99 {r['ack_p50']:.2f}/{r['ack_p99']:.2f} ms); "
                f"GC pauses: {r['gc']}; {r['where']}",
                flush=True,
            )
        p2p = produce_to_pop(bootstrap, admin, sidecar, args.p2p_samples, args.phase_s * 2)
        print(
            f"4. produce-to-pop (long poll wait_ms 20000, {p2p['n']} records, "
            f"{p2p['misses']} empty answers): p50 {p2p['p50']:.1f} ms, "
            f"p99 {p2p['p99']:.1f} ms, max {p2p['max']:.1f} ms",
            flush=True,
        )
        if args.profile_s > 0:
            profile = profile_sidecar(ctx, sidecar, topic, args.procs, args.records, args.profile_s)
            print("\n".join(profile), flush=True)
    finally:
        sidecar.stop()

    share: dict[tuple[int, bool], dict] = {}
    share_error = None
    try:
        for batch, sync in [(b, s) for b in SHARE_BATCHES for s in (False, True)]:
            r = share_throughput(
                ctx, bootstrap, admin, batch, sync, args.procs, args.records, args.phase_s
            )
            share[(batch, sync)] = r
            mode = "commit_sync per batch" if sync else "commit_async per poll"
            print(
                f"5. share group max.poll.records {batch:>4} ({mode}): "
                f"{r['accepted']:,} accepted in "
                f"{r['seconds']:.1f} s = {r['rate']:,.0f} msgs/s; mean poll "
                f"{r['mean_poll']:.0f} records; {r['members_warm']} of {args.procs} members "
                f"warm at the start; CPU {cpu_text(r['cpu_per_1k'])}; errors {r['errors']}",
                flush=True,
            )
    except Exception as exc:
        share_error = repr(exc)
        print(f"5. share group: FAILED {share_error}")

    load_end = os.getloadavg()
    print_table(args, raw_rate, kpd, latency, p2p, share, load_start, load_end)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "raw": raw_rate,
                    "kpd": kpd,
                    "latency": latency,
                    "p2p": p2p,
                    "share": {f"{b}-{'sync' if s else 'async'}": r for (b, s), r in share.items()},
                    "share_error": share_error,
                    "load": [load_start, load_end],
                    "broker_warm_up": warm_text,
                    "profile": profile,
                },
                indent=1,
                default=str,
            )
        )


def cpu_text(split: dict[str, float]) -> str:
    return (
        f"kpd {split['kpd']:.3f} + broker {split['broker']:.3f} (JIT compiler "
        f"{split['broker_jit']:.3f}) + clients "
        f"{split['clients']:.3f} core-s per 1,000 records"
    )


def print_table(
    args: argparse.Namespace,
    raw_rate: float,
    kpd: dict[int, dict],
    latency: list[dict],
    p2p: dict,
    share: dict[tuple[int, bool], dict],
    load_start: tuple,
    load_end: tuple,
) -> None:
    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    print()
    print(f"| measure ({args.records:,} x {VALUE_BYTES} B, {PARTITIONS} partitions) | value |")
    print("|---|---|")
    print(f"| raw confluent-kafka consume, 1 consumer | {raw_rate:,.0f} msgs/s |")
    for batch, r in kpd.items():
        print(
            f"| kpd pop+ack, batch {batch}, {clients_text(args)} | {r['rate']:,.0f} msgs/s "
            f"(pop p50/p99 {r['pop_p50']:.1f}/{r['pop_p99']:.1f} ms under load; "
            f"CPU {cpu_text(r['cpu_per_1k'])}) |"
        )
    for (batch, sync), r in share.items():
        mode = "commit_sync per batch" if sync else "commit_async per poll"
        print(
            f"| share group accept, max.poll.records {batch} ({mode}), {args.procs} procs "
            f"| {r['rate']:,.0f} msgs/s (mean poll {r['mean_poll']:.0f}; "
            f"CPU {cpu_text(r['cpu_per_1k'])}) |"
        )
    for r in latency:
        print(
            f"| pop latency batch {r['batch']}, 1 client | p50 {r['p50']:.2f} / p99 "
            f"{r['p99']:.2f} ms |"
        )
    if p2p:
        print(f"| produce-to-pop, long poll | p50 {p2p['p50']:.1f} / p99 {p2p['p99']:.1f} ms |")
    print()
    b100 = kpd.get(100, {}).get("rate", 0.0)
    if raw_rate:
        print(f"ratio kpd pop+ack batch 100 / raw consume: {b100 / raw_rate:.3f}")
    for batch in SHARE_BATCHES:
        if batch in kpd and (batch, False) in share and share[(batch, False)]["rate"]:
            ratio = kpd[batch]["rate"] / share[(batch, False)]["rate"]
            print(f"ratio kpd pop+ack / share group at batch {batch}: {ratio:.3f}")
    print()
    print(f"target pop+ack >= 50k msgs/s at batch 100: {b100:,.0f} -> {verdict(b100 >= 50_000)}")
    if (100, False) in share:
        s = share[(100, False)]["rate"]
        print(
            f"target pop+ack >= share group at batch 100: {b100:,.0f} vs {s:,.0f} -> "
            f"{verdict(b100 >= s)}"
        )
    for r in latency:
        print(
            f"target pop p99 <= 5 ms (batch {r['batch']}, waiting): {r['p99']:.2f} ms -> "
            f"{verdict(r['p99'] <= 5)}"
        )
    if p2p:
        print(
            f"target produce-to-pop p99 <= 20 ms: {p2p['p99']:.1f} ms -> "
            f"{verdict(p2p['p99'] <= 20)}"
        )
    print(f"load average start {load_start}, end {load_end}; cpus {os.cpu_count()}")


def clients_text(args: argparse.Namespace) -> str:
    per_proc = max(args.clients // args.procs, 1)
    if per_proc == 1:
        return f"{args.procs} procs"
    return f"{per_proc * args.procs} clients in {args.procs} procs"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--procs", type=int, default=4, help="client processes per phase")
    parser.add_argument(
        "--clients", type=int, default=0,
        help="concurrent pop+ack clients over the processes of phase 2 (default: one each)",
    )  # fmt: skip
    parser.add_argument("--phase-s", type=float, default=30, help="time bound of each phase")
    parser.add_argument("--latency-pops", type=int, default=500)
    parser.add_argument("--p2p-samples", type=int, default=200)
    parser.add_argument("--profile-s", type=float, default=0, help="py-spy the sidecar (0: off)")
    add_leases_argument(parser)
    broker_jit.add_argument(parser)
    parser.add_argument("--json", help="also write the figures to this file")
    return on_broker(run, parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
