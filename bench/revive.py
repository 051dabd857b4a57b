"""Benchmark of kpd's retry path (nack -> copy -> pop again) against a Kafka share group's release.

    .venv/bin/python bench/revive.py                   # local broker under .kpd/bench-kafka
    KPD_BOOTSTRAP=127.0.0.1:9092 .venv/bin/python bench/revive.py --records 20000

One run, one broker, one `kpd run` process, after uncounted rounds of kpd's phase have run until
the fresh broker's JIT compiler is quiet (`bench/broker_jit.py`, `--warm-up-s`; not with
KPD_BOOTSTRAP). Every record is delivered twice: the first delivery is given back, the second
settled for good. Printed:
  1. kpd: `--procs` client processes, each a pop (batch `--batch`) -> nack (delay 0: the message
     is copied to the group's retry topic at once) or ack (its second delivery) loop over HTTP;
     records settled per second, the nack and pop calls' p50/p99 under that load, and how many
     copies the sidecar read back from Kafka (`kpd_pop_copy_reads_total`) and wrote
     (`kpd_pop_retried_total`);
  2. the peer: a share group (KIP-932) with as many members, each record RELEASEd on its first
     delivery and ACCEPTed on its second (`Message.delivery_count()`), acknowledgements sent by
     commit_sync every `--batch` records, like a kpd nack or ack call.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka.admin import AdminClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import broker_jit  # noqa: E402
from bench.delay_load import create_topic  # noqa: E402
from bench.pop_load import (  # noqa: E402
    PARTITIONS,
    Sidecar,
    ack,
    pct,
    pop,
    produce_backlog,
    run_processes,
)
from bench.runs import on_broker  # noqa: E402
from bench.share_groups import configure_share_group, share_consumer  # noqa: E402

WARM_UP_ROUND_S = 10.0  # a round of kpd's phase in the broker's warm-up


def nack(http: httpx.Client, group: str, receipts: list[str]) -> list[dict]:
    items = [{"receipt": receipt, "delay_ms": 0} for receipt in receipts]
    answer = http.post(f"/v1/groups/{group}/nack", json={"items": items}, timeout=60)
    answer.raise_for_status()
    return list(answer.json()["results"])


def kpd_worker(
    url: str, group: str, topic: str, batch: int, stop_at: float, target: int, done: Any, out: Any
) -> None:
    """Pop; nack first deliveries, ack second ones; until `target` records are settled."""
    settled = empties = 0
    pop_ms: list[float] = []
    nack_ms: list[float] = []
    first = last = 0.0
    error = None
    with httpx.Client(base_url=url, timeout=60) as http:
        try:
            while time.time() < stop_at and done.value < target and empties < 20:
                t0 = time.perf_counter()
                got = pop(http, group, topic, batch, wait_ms=500)
                pop_ms.append((time.perf_counter() - t0) * 1000)
                empties = 0 if got else empties + 1
                fresh = [m["receipt"] for m in got if m["delivery_count"] == 1]
                again = [m["receipt"] for m in got if m["delivery_count"] > 1]
                if fresh:
                    t1 = time.perf_counter()
                    nack(http, group, fresh)
                    nack_ms.append((time.perf_counter() - t1) * 1000)
                if again:
                    ok = sum(r["status"] == "acked" for r in ack(http, group, again))
                    settled += ok
                    with done.get_lock():
                        done.value += ok
                    last = time.time()
                    first = first or last
        except Exception as exc:  # reported, never hidden
            error = repr(exc)
    out.put(
        {"settled": settled, "first": first, "last": last, "pop_ms": pop_ms, "nack_ms": nack_ms,
         "error": error}
    )  # fmt: skip


def share_worker(
    bootstrap: str, group: str, topic: str, batch: int, stop_at: float, target: int, done: Any,
    out: Any,
) -> None:  # fmt: skip
    """RELEASE first deliveries, ACCEPT later ones; commit_sync every `batch` acknowledgements."""
    from confluent_kafka import AcknowledgeType

    settled = pending = 0
    first = last = 0.0
    error = None
    try:
        with share_consumer(bootstrap, group, batch) as consumer:
            consumer.subscribe([topic])
            while time.time() < stop_at and done.value < target:
                accepted = 0
                for message in consumer.poll(0.5):
                    if message.error() is not None:
                        continue
                    again = message.delivery_count() > 1
                    kind = AcknowledgeType.ACCEPT if again else AcknowledgeType.RELEASE
                    consumer.acknowledge(message, kind)
                    accepted += again
                    pending += 1
                    if pending >= batch:
                        consumer.commit_sync(30)
                        pending = 0
                if pending:
                    consumer.commit_sync(30)
                    pending = 0
                if accepted:
                    settled += accepted
                    with done.get_lock():
                        done.value += accepted
                    last = time.time()
                    first = first or last
    except Exception as exc:
        error = repr(exc)
    out.put({"settled": settled, "first": first, "last": last, "error": error})


def phase(ctx: Any, worker: Any, first_arg: str, group: str, topic: str, args: Any) -> dict:
    done = ctx.Value("q", 0)
    stop_at = time.time() + args.phase_s

    def args_for(_: int) -> tuple:
        return (first_arg, group, topic, args.batch, stop_at, args.records, done)

    results = run_processes(ctx, worker, args_for, args.procs, args.phase_s)
    settled = sum(r["settled"] for r in results)
    # From the first record settled for good to the last: joining members and spawned
    # interpreters importing are not counted, for either system.
    firsts = [r["first"] for r in results if r["first"]]
    span = max((r["last"] for r in results), default=0.0) - min(firsts, default=0.0)
    return {
        "settled": settled,
        "rate": settled / span if span > 0 else 0.0,
        "pop_ms": [x for r in results for x in r.get("pop_ms", [])],
        "nack_ms": [x for r in results for x in r.get("nack_ms", [])],
        "errors": [r["error"] for r in results if r["error"]],
    }


def warm_up(
    ctx: Any, admin: AdminClient, bootstrap: str, sidecar: Sidecar, broker: int, args: Any
) -> str:
    """Uncounted rounds of kpd's phase until the fresh broker's JIT compiler is quiet: kpd's
    phase comes first, and would otherwise share the cores with it (`bench/broker_jit.py`)."""
    short = argparse.Namespace(**{**vars(args), "phase_s": WARM_UP_ROUND_S})

    def one_round() -> None:
        topic = create_topic(admin, f"bench-revive-warm-{uuid.uuid4().hex[:6]}", PARTITIONS)
        produce_backlog(bootstrap, topic, args.records)
        phase(ctx, kpd_worker, sidecar.url, f"{topic}-group", topic, short)

    return broker_jit.warm_up(broker, one_round, args.warm_up_s).text()


def run(bootstrap: str, args: argparse.Namespace) -> None:
    ctx = mp.get_context("spawn")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    print(f"broker {bootstrap}; load average at start {os.getloadavg()}")
    sidecar = Sidecar(bootstrap, Path(tempfile.mkdtemp(prefix="kpd-bench-revive-")))
    try:
        sidecar.start()
        broker = broker_jit.local_broker()
        if args.warm_up_s > 0 and broker is not None:
            warm = warm_up(ctx, admin, bootstrap, sidecar, broker, args)
            print(f"broker warm-up: {warm}", flush=True)
        topic = create_topic(admin, f"bench-revive-{uuid.uuid4().hex[:6]}", PARTITIONS)
        produce_backlog(bootstrap, topic, args.records)
        group = f"bench-revive-{uuid.uuid4().hex[:6]}"
        before = sidecar.metrics()
        kpd = phase(ctx, kpd_worker, sidecar.url, group, topic, args)
        after = sidecar.metrics()
    finally:
        sidecar.stop()
    retried = after.get("kpd_pop_retried_total", 0.0) - before.get("kpd_pop_retried_total", 0.0)
    reads = (
        f"{after['kpd_pop_copy_reads_total'] - before['kpd_pop_copy_reads_total']:,.0f} of them"
        if "kpd_pop_copy_reads_total" in after
        else "a sidecar that does not say how many of them were"
    )
    print(
        f"1. kpd pop -> nack (delay 0) -> pop -> ack, batch {args.batch}, {args.procs} procs: "
        f"{kpd['settled']:,} settled = {kpd['rate']:,.0f} records/s; "
        f"nack p50/p99 {pct(kpd['nack_ms'], 50):.1f}/{pct(kpd['nack_ms'], 99):.1f} ms, "
        f"pop p50/p99 {pct(kpd['pop_ms'], 50):.1f}/{pct(kpd['pop_ms'], 99):.1f} ms; "
        f"{retried:,.0f} retry copies, {reads} read back from Kafka; "
        f"errors {kpd['errors']}",
        flush=True,
    )
    topic = create_topic(admin, f"bench-revive-share-{uuid.uuid4().hex[:6]}", PARTITIONS)
    produce_backlog(bootstrap, topic, args.records)
    group = f"bench-revive-share-{uuid.uuid4().hex[:6]}"
    configure_share_group(admin, group)
    share = phase(ctx, share_worker, bootstrap, group, topic, args)
    print(
        f"2. share group RELEASE -> ACCEPT, commit_sync every {args.batch}, {args.procs} members: "
        f"{share['settled']:,} settled = {share['rate']:,.0f} records/s; "
        f"errors {share['errors']}",
        flush=True,
    )
    if share["rate"]:
        print(f"ratio kpd / share group: {kpd['rate'] / share['rate']:.3f}")
    print(f"load average at the end {os.getloadavg()}; cpus {os.cpu_count()}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--procs", type=int, default=2, help="client processes per phase")
    parser.add_argument("--phase-s", type=float, default=60, help="time bound of each phase")
    broker_jit.add_argument(parser)
    return on_broker(run, parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
