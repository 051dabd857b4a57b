"""Benchmark of the delay service against a raw confluent-kafka consume->produce loop.

    .venv/bin/python bench/delay.py                      # local broker under .kpd/bench-kafka
    KPD_BOOTSTRAP=127.0.0.1:9092 .venv/bin/python bench/delay.py --pending 1000000

One run, one broker, one `kpd run` process (real Kafka, real RocksDB). Uncounted rounds of the raw
loops and of a mixed phase (on a sidecar of their own) first run until the fresh broker's JIT
compiler is quiet (`bench/broker_jit.py`; bounded by `--warm-up-s`; not with KPD_BOOTSTRAP), and
each phase prints what the compiler used meanwhile. Then it prints:
  * raw loop: consume N records from a topic and produce them to another, plain and
    transactional (2000 records per transaction, offsets in the transaction), the physical
    reference on this machine;
  * ingest: N buffer records already on the buffer topic when the sidecar starts, schedules/s from
    the first to the last `kpd_schedules_scheduled_total` increment;
  * sustained dispatch: records due at a fixed rate (default 5k/s for 20 s), scheduled before the
    first is due; lateness = the broker's append time of the delivered record (its target topic
    has message.timestamp.type=LogAppendTime) - kpd-deliver-at, and visible lateness = when a
    read_committed consumer got it - kpd-deliver-at;
  * mixed load: the same, while far-future schedules arrive on the buffer topic at --mixed-ingest
    per second (default 15k/s) for as long as the due records flow;
  * short delays at a trickle: schedules due 20 ms after they are produced, one every 25 ms, the
    same two lateness figures (nothing else fills the leader's reads);
  * burst: N records due in the same millisecond; drain rate = N / (last delivery - due);
  * what the broker wrote per scheduled record (the burst's ingest) and per delivery (its drain),
    records and bytes by topic (`bench/broker_writes.py`);
  * the sidecar's garbage-collection pauses during each lateness phase (`bench/gc_pauses.py`),
    and its RocksDB reads of schedule state (a new id's check at ingest, a due schedule it did
    not hold in memory);
  * RSS (VmRSS) of the sidecar with 0 and with each --pending count of far-future schedules,
    right after their ingest and again once the worker has handed freed memory back.
Every record is 100 bytes of value, a 16-byte key and one user header.
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
sys.path.insert(0, str(ROOT))

from bench import broker_jit, gc_pauses  # noqa: E402
from bench.broker_writes import snapshot  # noqa: E402
from bench.delay_load import (  # noqa: E402
    DAY_MS,
    buffer_records,
    create_target,
    create_topic,
    now_ms,
    produce_fast,
    raw_loop,
    read_deliveries,
)
from bench.delay_phases import (  # noqa: E402
    INGEST_FLOOR_PER_S,
    Sidecar,
    reads_text,
    rebuild,
    sustained,
    trickle,
    warm_up_broker,
)
from bench.runs import on_broker  # noqa: E402

SETTLE_S = 15.0  # longer than memory_trim's period (10 s): RSS once freed memory is handed back


def run(bootstrap: str, args: argparse.Namespace) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    home = Path(tempfile.mkdtemp(prefix="kpd-bench-"))
    results: dict[str, str] = {}
    print(f"broker {bootstrap}; sidecar files in {home}")

    broker = broker_jit.local_broker()
    if args.warm_up_s > 0 and broker is not None:
        warm_up_broker(bootstrap, admin, home / "warm-up", args.shards, broker, args.warm_up_s)
    jit = broker_jit.CompilerMeter(broker)
    raw_plain = raw_loop(bootstrap, admin, args.raw_n, transactional=False)
    raw_txn = raw_loop(bootstrap, admin, args.raw_n, transactional=True)
    print(
        f"raw consume->produce: {raw_plain:,.0f}/s plain, {raw_txn:,.0f}/s transactional; "
        f"{jit.text()}"
    )

    sidecar = Sidecar(bootstrap, home, args.shards)
    try:
        sidecar.start()
        warm = create_topic(admin, f"bench-warm-{uuid.uuid4().hex[:6]}")
        sidecar.wait_delivering(warm)
        rss0 = sidecar.rss_mb()
        print(f"RSS with 0 pending: {rss0:.0f} MB")

        results["dispatch"] = broker_jit.with_compiler_cpu(
            broker, lambda: sustained(bootstrap, admin, sidecar, args, ingest_rate=0)
        )
        print("sustained:", results["dispatch"])
        results["mixed"] = broker_jit.with_compiler_cpu(
            broker, lambda: sustained(bootstrap, admin, sidecar, args, args.mixed_ingest)
        )
        print("mixed:", results["mixed"])
        results["trickle"] = broker_jit.with_compiler_cpu(
            broker, lambda: trickle(bootstrap, admin, sidecar)
        )
        print("trickle:", results["trickle"])

        # Burst: N due in the same millisecond.
        jit = broker_jit.CompilerMeter(broker)
        target = create_target(admin, f"bench-burst-{uuid.uuid4().hex[:6]}")
        before = sidecar.metrics().get("kpd_schedules_scheduled_total", 0)
        due = now_ms() + int(args.burst / INGEST_FLOOR_PER_S * 1000) + 8000
        topics, data_dir = [*sidecar.topics, target], broker_data_dir()
        at_start = snapshot(bootstrap, topics, data_dir)
        produce_fast(
            bootstrap,
            sidecar.buffer,
            buffer_records(target, args.burst, iter(lambda: due, None), "burst-"),
        )
        sidecar.wait_scheduled(int(before) + args.burst, 120)
        if now_ms() > due:
            print("  !! burst not fully scheduled before its due time")
        scheduled = snapshot(bootstrap, topics, data_dir)
        gc_before, reads_before = gc_pauses.read(sidecar.url), sidecar.index_reads()
        rows = read_deliveries(bootstrap, target, args.burst, 300)
        gc_row = gc_pauses.read(sidecar.url).minus(gc_before).row()
        reads = reads_text(reads_before, sidecar.index_reads())
        time.sleep(1.0)  # the last step's markers and state records are in too
        drained = snapshot(bootstrap, topics, data_dir)
        results["writes"] = "\n".join(
            [
                scheduled.minus(at_start).per(args.burst, "scheduled record (ingest)"),
                drained.minus(scheduled).per(len(rows), "delivery (burst drain)"),
            ]
        )
        print("broker writes:\n" + results["writes"])
        drain_s = (rows[:, 1].max() - due) / 1000
        visible_s = (rows[:, 2].max() - due) / 1000
        early = int((rows[:, 1] < rows[:, 0]).sum())
        burst_rate = len(rows) / max(drain_s, 0.001)
        results["burst"] = (
            f"{len(rows)} due at one instant: last delivered {drain_s:.2f} s after due "
            f"({burst_rate:,.0f}/s), last visible {visible_s:.2f} s "
            f"({len(rows) / visible_s:,.0f}/s); {early} early; {reads}; GC pauses: {gc_row}; "
            f"{jit.text()}"
        )
        print("burst:", results["burst"])
        sidecar.stop()

        # Ingest and RSS: far-future schedules produced while the sidecar is stopped.
        target = create_topic(admin, f"bench-far-{uuid.uuid4().hex[:6]}")
        total = sidecar_total = 0
        rss_rows = [f"0 pending: {rss0:.0f} MB"]
        ingest_rates = []
        for level in args.pending:
            add = level - total
            produce_rate = produce_fast(
                bootstrap,
                sidecar.buffer,
                buffer_records(
                    target, add, (now_ms() + DAY_MS + i for i in range(add)), f"far{level}-"
                ),
            )
            ready_s = sidecar.start()
            reached, rate, seconds = sidecar.wait_scheduled(add, args.max_ingest_s)
            sidecar_total = total + reached
            pending = sidecar.metrics().get("kpd_schedules_pending", -1)
            rss = sidecar.rss_mb()
            time.sleep(SETTLE_S)  # what the ingest's buffers held is handed back (memory_trim)
            settled = sidecar.rss_mb()
            ingest_rates.append(rate)
            print(
                f"ingest of {add:,} (producer {produce_rate:,.0f}/s): {reached:,} in "
                f"{seconds:.1f} s = {rate:,.0f} schedules/s (ready after {ready_s:.1f} s); "
                f"pending {pending:,.0f}; RSS {rss:.0f} MB, {settled:.0f} MB {SETTLE_S:.0f} s later"
            )
            rss_rows.append(
                f"{pending:,.0f} pending: {rss:.0f} MB, {settled:.0f} MB {SETTLE_S:.0f} s later "
                f"(ingest {reached:,} at {rate:,.0f}/s in {seconds:.0f} s)"
            )
            sidecar.stop()
            total = sidecar_total
            if reached < add:
                print(f"  !! stopped at {sidecar_total:,} pending (time cap {args.max_ingest_s} s)")
                break
        # A cold start on the largest backlog: the RSS a restarted sidecar settles at.
        ready_s = sidecar.start()
        sidecar.wait_delivering(warm)
        rss = sidecar.rss_mb()
        rss_rows.append(f"restart with {total:,} pending: {rss:.0f} MB, ready in {ready_s:.1f} s")
        sidecar.stop()
        rss_rows.append(rebuild(bootstrap, sidecar, ready_s))
    finally:
        sidecar.stop()

    ingest = max(ingest_rates) if ingest_rates else 0.0
    print("\n== kpd delay service vs raw consume->produce loop (same broker) ==")
    print(f"raw loop, plain               {raw_plain:>10,.0f} records/s")
    print(f"raw loop, transactional       {raw_txn:>10,.0f} records/s")
    print(
        f"ingest                        {ingest:>10,.0f} schedules/s "
        f"({ingest / raw_txn:.2f} of txn raw, {ingest / raw_plain:.2f} of plain)"
    )
    print(
        f"burst drain                   {burst_rate:>10,.0f} deliveries/s "
        f"({burst_rate / raw_txn:.2f} of txn raw, {burst_rate / raw_plain:.2f} of plain)"
    )
    print(f"sustained dispatch            {results['dispatch']}")
    print(f"mixed load                    {results['mixed']}")
    print(f"short delays at a trickle     {results['trickle']}")
    print(f"burst                         {results['burst']}")
    print(f"broker writes\n{results['writes']}")
    for row in rss_rows:
        print(f"RSS                           {row}")


def broker_data_dir() -> Path | None:
    """The data folder of the bench's own local broker (`broker_for_tests`), if it runs one."""
    folder = ROOT / ".kpd" / "bench-kafka" / f"session-{os.getpid()}" / "data"
    return folder if folder.is_dir() and "KPD_BOOTSTRAP" not in os.environ else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raw-n", type=int, default=200_000)
    parser.add_argument("--rate", type=int, default=5000, help="due records per second")
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument(
        "--mixed-ingest", type=int, default=15_000, help="far-future schedules per second"
    )
    parser.add_argument("--burst", type=int, default=100_000)
    parser.add_argument(
        "--pending",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1_000_000, 5_000_000],
        help="cumulative far-future backlog sizes at which RSS is measured",
    )
    parser.add_argument("--max-ingest-s", type=float, default=600)
    broker_jit.add_argument(parser)
    parser.add_argument(
        "--shards", type=int, default=2, help="the sidecar's KPD_SHARDS (kpd's default is 8)"
    )
    return on_broker(run, parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
