"""What a hot standby pays to apply the schedules topic: today's applier against the one before.

    .venv/bin/python bench/standby_apply.py               # 100k schedules, 3 rounds
    .venv/bin/python bench/standby_apply.py --n 200000 --rounds 5

By default (`KPD_STANDBY_SCHEDULES=all`) every worker applies the schedule records of every shard
it does not lead (docs/architecture.md), so with w workers each record is applied w - 1 times more:
this cost is what makes kpd's CPU per record rise with workers (BENCHMARKS.md). For each design,
into a fresh RocksDB: N `scheduled` records (100-byte payloads, ids spread over 8 shards, each in
the partition Kafka's partitioner gives it), then the N `delivered` markers that replace them,
handed over in polls of 2,000 as the state follower's consumer does. Printed: CPU microseconds
per record (`time.process_time`, best of --rounds, the designs alternating), and the floor: the
same records' RocksDB puts alone, one write per poll (what any applier pays). Baseline:
`delay_service/schedules.py` as of BASELINE_COMMIT (`ScheduleIndex.apply_messages`, with a
RocksDB read of the due key of every delivered id; before 2026-11-28 the baseline was 106f40b,
with a read of every delivered id's whole record, and before 2026-11-26 450bff4, with a murmur2
hash, a read and an encode per record). Today's applier is one `ScheduleFollower` per run, as
one reading of the topic has it (it reads whole the ids of the first records of each partition),
before and after the reading has caught up (a standby's, once started: no due key read, and
since 2026-11-29 20:39 no state looked up or compared at all, `ScheduleIndex.stage_followed`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path

from confluent_kafka import Message

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.baseline import module_at  # noqa: E402
from delay_service import schedules  # noqa: E402
from delay_service.schedule_follower import ScheduleFollower  # noqa: E402
from foundation.shards import ShardMap  # noqa: E402
from foundation.state_follower import OFFSETS_CF, Applier  # noqa: E402
from foundation.store import Batch, Store  # noqa: E402

BASELINE_COMMIT = "722e604058308160c75c46fe1ade4870f610ba04"
SHARDS = 8
POLL = 2_000  # StateFollower.poll_once: messages per consume
DUE_MS = 1_767_225_600_000


def records(n: int, shard_map: ShardMap) -> tuple[list[Message], list[Message]]:
    """The schedules topic's records of n schedules: scheduled, then delivered."""
    scheduled, delivered = [], []
    for i in range(n):
        pending = schedules.Schedule(schedule_id=f"order-{i}", state=schedules.State.SCHEDULED,
                                     target="orders", due_ms=DUE_MS + i, value=b"x" * 100,
                                     enqueued_ms=DUE_MS - 60_000)  # fmt: skip
        done = pending.settled(schedules.State.DELIVERED, DUE_MS + i + 3)
        partition = shard_map.partition_of_key(pending.schedule_id)
        for out, record, offset in ((scheduled, pending, i), (delivered, done, n + i)):
            out.append(Message(topic="kpd.schedules", partition=partition, offset=offset,
                               key=record.schedule_id.encode(), value=record.encode()))  # fmt: skip
    return scheduled, delivered


def baseline(design: types.ModuleType) -> Callable[[Store], Applier]:
    return lambda store: design.ScheduleIndex(store, ShardMap(SHARDS, SHARDS)).apply_messages


def one_store_index(store: Store) -> schedules.ScheduleIndex:
    """Today's index with every shard's schedules in one store, as the baselines keep them: the
    applier's cost is measured, not that of a store per shard."""
    every_shard = types.SimpleNamespace(of=lambda _: store)  # `ShardStores.of` alone is used
    return schedules.ScheduleIndex(every_shard, ShardMap(SHARDS, SHARDS))  # type: ignore[arg-type]


def todays(store: Store) -> Applier:
    return ScheduleFollower(one_store_index(store)).apply_messages


def todays_at_head(store: Store) -> Applier:
    """Today's, in a reading that has caught up (a standby's once started): no due-key reads."""
    follower = ScheduleFollower(one_store_index(store))
    follower.at_head = lambda: True
    return follower.apply_messages


def floor(store: Store) -> Applier:
    def apply(batch: Batch, polled: Sequence[Message]) -> None:
        for message in polled:
            batch.put(schedules.SCHEDULE_CF, message.key(), message.value())  # type: ignore[arg-type]

    return apply


def timed(applier: Callable[[Store], Applier], phases: list[list[Message]]) -> list[float]:
    """CPU us per record of each phase, into a fresh RocksDB, by one applier."""
    with tempfile.TemporaryDirectory() as folder:
        store = Store(Path(folder), [*schedules.COLUMN_FAMILIES, OFFSETS_CF])
        apply = applier(store)
        figures = []
        for phase in phases:
            started = time.process_time()
            for start in range(0, len(phase), POLL):
                batch = store.batch()
                apply(batch, phase[start : start + POLL])
                store.write(batch)
            figures.append((time.process_time() - started) / len(phase) * 1e6)
        store.close()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    phases = list(records(args.n, ShardMap(SHARDS, SHARDS)))
    designs = {
        f"before ({BASELINE_COMMIT[:7]})": baseline(
            module_at(BASELINE_COMMIT, "delay_service/schedules.py")
        ),
        "today": todays,
        "today, caught up": todays_at_head,
        "floor: RocksDB puts alone": floor,
    }
    best: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for name, apply in designs.items():
            figures = timed(apply, phases)
            best[name] = [min(pair) for pair in zip(best.get(name, figures), figures, strict=True)]
    print(f"{args.n:,} schedules, {SHARDS} shards, polls of {POLL:,}; CPU us per record applied")
    print(f"{'':32s} {'scheduled':>10s} {'delivered':>10s}")
    for name, (scheduled, delivered) in best.items():
        print(f"{name:32s} {scheduled:10.2f} {delivered:10.2f}")
    today, before = best["today"], best[f"before ({BASELINE_COMMIT[:7]})"]
    ratios = [now / then for now, then in zip(today, before, strict=True)]
    print(f"today / before: {ratios[0]:.2f} scheduled, {ratios[1]:.2f} delivered")
    caught_up = best["today, caught up"][1] / today[1]
    print(f"today, caught up / today: {caught_up:.2f} delivered")
    return 0


if __name__ == "__main__":
    sys.exit(main())
