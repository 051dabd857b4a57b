"""What FIFO per key costs: pop+ack throughput with `ordering = "key"` beside `"none"`.

    .venv/bin/python bench/fifo.py --records 20000 --phase-s 15

One broker; per key shape (a key of its own per record, and `--keys` keys in turn), one
backlog topic (3 partitions) and, one after the other, a sidecar whose groups order by key and
one whose groups do not (docs/fifo.md). Each runs `bench/pop_phases.kpd_throughput`: `--procs`
client processes in pop -> ack loops at batches 1, 10 and 100, a fresh group each, printing
msgs/s and the sidecar's CPU per 1,000 records, and the ratio of "key" to "none".
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.delay_load import create_topic  # noqa: E402
from bench.pop_load import PARTITIONS, Sidecar, produce_backlog  # noqa: E402
from bench.pop_phases import kpd_throughput  # noqa: E402
from bench.runs import on_broker  # noqa: E402

BATCHES = (1, 10, 100)


def run(bootstrap: str, args: argparse.Namespace) -> None:
    ctx = mp.get_context("spawn")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    print(f"broker {bootstrap}; load average at start {os.getloadavg()}")
    for keys in (0, args.keys):
        shape = "a key per record" if not keys else f"{keys:,} keys in turn"
        topic = create_topic(admin, f"bench-fifo-{uuid.uuid4().hex[:6]}", PARTITIONS)
        produce_backlog(bootstrap, topic, args.records, keys=keys)
        figures: dict[str, dict[int, dict]] = {}
        for ordering in ("none", "key"):
            home = Path(tempfile.mkdtemp(prefix="kpd-bench-fifo-"))
            sidecar = Sidecar(bootstrap, home, ordering=ordering)
            try:
                sidecar.start()
                figures[ordering] = {
                    batch: kpd_throughput(
                        ctx, sidecar, topic, batch, args.procs, args.records, args.phase_s
                    )
                    for batch in BATCHES
                }
            finally:
                sidecar.stop()
            for batch, r in figures[ordering].items():
                cpu = r["cpu_per_1k"]["kpd"]
                print(
                    f"{shape}, ordering {ordering:>4}, batch {batch:>3}, {args.procs} procs: "
                    f"{r['rate']:,.0f} msgs/s, sidecar {cpu:.3f} core-s per 1,000",
                    flush=True,
                )
        for batch in BATCHES:
            none, key = figures["none"][batch], figures["key"][batch]
            cpu = key["cpu_per_1k"]["kpd"] / none["cpu_per_1k"]["kpd"]
            print(
                f"{shape}, batch {batch:>3}: key/none throughput x{key['rate'] / none['rate']:.2f},"
                f" sidecar CPU per record x{cpu:.2f}"
            )
    print(f"load average at end {os.getloadavg()}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=1_000, help="keys of the second backlog")
    parser.add_argument("--procs", type=int, default=4, help="client processes per phase")
    parser.add_argument("--phase-s", type=float, default=15, help="time bound of each phase")
    return on_broker(run, parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
