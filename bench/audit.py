"""Benchmark of the Spark delivery audit against a single-process DuckDB baseline.

    .venv/bin/python bench/audit.py                       # 1M and 10M records
    .venv/bin/python bench/audit.py --sizes 1000000,3000000 --dir /tmp/kpd-bench

Synthetic logs are typed Parquet made with numpy/pyarrow (cached per size and generator version
in --dir): ~49 % schedules, of which 97 % delivered (dispatch lateness ~ exponential, mean 5 ms),
2 % cancelled, the rest pending plus a few missing; 2 % of the delivered schedules reach kpd 1-10 s
after their due time (late end to end, not by dispatch); 0.01 % duplicate deliveries; the
remainder pop events over 4 groups (70 % deliveries without due time, retries, dead letters);
16 target topics; one hour of traffic. `--generator 1` makes the logs of the earlier runs
(no overdue arrivals, pop retries and dead letters only), for before/after comparisons.

Spark: the full `kpd audit` (`spark.audit.main`, every figure, Parquet lists, plots, HTML) on
`local[2]`, timed after the session is up (its start-up is printed apart). DuckDB: the core of the
same computation (counts per target and event, exact percentiles of both lateness measures per
target and overall, missing and duplicates per target) on the same Parquet, 2 threads. Both
answers are cross-checked.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
HOUR = 3_600_000
GRACE = 60_000


def generate(n: int, path: Path, version: int = 2, seed: int = 7) -> dict[str, int]:
    """Write a synthetic log of exactly `n` records; return the expected anomaly counts."""
    rng = np.random.default_rng(seed)
    s = int(n * 0.49)
    fate = rng.random(s)
    delivered = fate < 0.97
    cancelled = (fate >= 0.97) & (fate < 0.99)
    missing = fate >= 0.9999
    due = T0 + rng.integers(0, HOUR, s)
    end = T0 + HOUR + 10_000  # newest delivery is before this; pending due after it
    pending = ~delivered & ~cancelled & ~missing
    due[pending] = end + 10 * 60_000 + rng.integers(0, HOUR, int(pending.sum()))
    due[missing] = T0 + rng.integers(0, HOUR // 2, int(missing.sum()))
    sched_at = np.minimum(due, T0) - rng.integers(0, HOUR, s)
    target = rng.integers(0, 16, s)
    d_idx = np.flatnonzero(delivered)
    dup_idx = rng.choice(d_idx, max(1, int(s * 0.0001)), replace=False)
    d_idx = np.concatenate([d_idx, dup_idx])
    enqueued = sched_at.copy()
    if version >= 2:  # overdue on arrival: scheduled (and enqueued) after the due time
        overdue = np.flatnonzero(delivered & (rng.random(s) < 0.02))
        enqueued[overdue] = due[overdue] + rng.integers(1_000, 10_000, overdue.size)
        sched_at = np.where(enqueued > due, enqueued, sched_at)
    lateness = rng.exponential(5.0, d_idx.size).astype(np.int64)
    lateness += np.maximum(enqueued[d_idx] - due[d_idx], 0)
    c_idx = np.flatnonzero(cancelled)
    p = n - s - d_idx.size - c_idx.size
    assert p > 0

    def part(event: str, idx: np.ndarray, at: np.ndarray, **extra: pa.Array) -> pa.Table:
        ids = pc.binary_join_element_wise("s", pc.cast(pa.array(idx), pa.string()), "")
        m = idx.size
        cols = {
            "event": pa.array([event]).take(pa.array(np.zeros(m, np.int32))),
            "id": ids,
            "target": pc.binary_join_element_wise(
                "topic-",
                pc.cast(pa.array(target[idx] if event != "pop" else idx % 16), pa.string()),
                "",
            ),
            "due_ms": pa.array(due[idx]) if event != "pop" else pa.nulls(m, pa.int64()),
            "at_ms": pa.array(at),
            "enqueued_ms": pa.array(enqueued[idx]) if event != "pop" else pop_enqueued(at),
            "delivery_count": pa.array(np.ones(m, np.int64)),
            "node": pa.array(["node-a", "node-b"]).take(pa.array(rng.integers(0, 2, m))),
            "group": pa.nulls(m, pa.string()),
        }
        return pa.table(cols | extra)

    def pop_enqueued(at: np.ndarray) -> pa.Array:
        return pa.nulls(at.size, pa.int64()) if version < 2 else pa.array(at - 1_000)

    pop_ids = rng.integers(0, p, p)
    if version < 2:
        kind = pa.array(rng.random(p) >= 0.9, pa.int8()).cast(pa.int32())
        pop_event = pa.array(["retried", "dead-lettered"]).take(kind)
    else:
        kind = pa.array(rng.choice(3, p, p=[0.7, 0.27, 0.03]), pa.int32())
        pop_event = pa.array(["delivered", "retried", "dead-lettered"]).take(kind)
    pop = part("pop", pop_ids, T0 + rng.integers(0, HOUR, p))
    pop = pop.set_column(0, "event", pop_event).set_column(
        pop.schema.get_field_index("group"),
        "group",
        pc.binary_join_element_wise("group-", pc.cast(pa.array(pop_ids % 4), pa.string()), ""),
    )
    table = pa.concat_tables(
        [
            part("scheduled", np.arange(s), sched_at),
            part("delivered", d_idx, due[d_idx] + lateness),
            part("cancelled", c_idx, np.minimum(due[c_idx] - 1, T0 + HOUR)),
            pop,
        ]
    )
    assert table.num_rows == n
    pq.write_table(table, path, row_group_size=1_000_000)
    return {"missing": int(missing.sum()), "duplicates": int(dup_idx.size)}


DUCKDB_SQL = """
WITH log AS (SELECT * FROM read_parquet('{path}')),
counts AS (SELECT target, event, count(*) AS n FROM log GROUP BY ALL),
delay AS (SELECT * FROM log WHERE "group" IS NULL),
deliveries AS (
  SELECT target, at_ms - due_ms AS lat,
         at_ms - greatest(due_ms, coalesce(enqueued_ms, due_ms)) AS disp
  FROM log WHERE event = 'delivered' AND due_ms IS NOT NULL),
lat AS (
  SELECT target, count(*) AS n, quantile_cont(lat, [0.5, 0.95, 0.99, 0.999]) AS q,
         quantile_cont(disp, [0.5, 0.95, 0.99, 0.999]) AS dq, max(lat) AS mx,
         count(*) FILTER (WHERE disp > {late}) AS late,
         count(*) FILTER (WHERE lat > {late}) AS late_e2e
  FROM deliveries GROUP BY GROUPING SETS ((target), ())),
sched AS (SELECT id, arg_max(target, at_ms) AS target, arg_max(due_ms, at_ms) AS due_ms
          FROM delay WHERE event = 'scheduled' GROUP BY id),
resolved AS (SELECT DISTINCT id FROM delay WHERE event IN ('delivered', 'cancelled', 'invalid')),
endt AS (SELECT max(at_ms) AS end_ms FROM log),
missing AS (SELECT target, count(*) AS n FROM sched ANTI JOIN resolved USING (id), endt
            WHERE due_ms + {grace} <= end_ms GROUP BY target),
dups AS (SELECT min(target) AS target FROM delay WHERE event = 'delivered'
         GROUP BY id HAVING count(*) > 1)
SELECT
  (SELECT count(*) FROM counts) AS count_rows,
  (SELECT q[3] FROM lat WHERE target IS NULL) AS p99,
  (SELECT dq[3] FROM lat WHERE target IS NULL) AS dispatch_p99,
  (SELECT late FROM lat WHERE target IS NULL) AS late,
  (SELECT late_e2e FROM lat WHERE target IS NULL) AS late_end_to_end,
  (SELECT count(*) FROM lat) AS lat_rows,
  (SELECT coalesce(sum(n), 0) FROM missing) AS missing,
  (SELECT count(*) FROM dups) AS duplicates,
  (SELECT count(*) FROM (SELECT target, count(*) FROM dups GROUP BY target)) AS dup_targets
"""
LATE_MS = 1000


def run_duckdb(path: Path, threads: int) -> tuple[float, dict[str, float]]:
    con = duckdb.connect(config={"threads": threads})
    start = time.perf_counter()
    query = DUCKDB_SQL.format(path=path, grace=GRACE, late=LATE_MS)
    cursor = con.execute(query)
    row = cursor.fetchone()
    took = time.perf_counter() - start
    assert row is not None
    names = [d[0] for d in cursor.description]
    return took, dict(zip(names, row, strict=True))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000000,10000000")
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "kpd-audit-bench"))
    ap.add_argument("--driver-memory", default="6g")
    ap.add_argument("--generator", type=int, choices=(1, 2), default=2, help="log generator")
    args = ap.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    work = Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    sizes = [int(x) for x in args.sizes.split(",")]

    from spark.audit import local_session
    from spark.audit import main as audit

    started = time.perf_counter()
    session = local_session(
        "local[2]",
        kafka=False,
        driver_memory=args.driver_memory,
        conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "8"},
    )
    startup = time.perf_counter() - started
    rows = []
    for n in sizes:
        path = work / f"log-{n}-v{args.generator}.parquet"
        meta = work / f"log-{n}-v{args.generator}.json"
        t = time.perf_counter()
        if not (path.exists() and meta.exists()):
            meta.write_text(json.dumps(generate(n, path, args.generator)))
        gen_s = time.perf_counter() - t
        expected = json.loads(meta.read_text())
        out = work / f"out-{n}"
        t = time.perf_counter()
        status = audit(
            [
                "--input",
                str(path),
                "--out",
                str(out),
                "--max-missing",
                "-1",
                "--max-duplicates",
                "-1",
                "--late-threshold-ms",
                str(LATE_MS),
            ]
        )
        spark_s = time.perf_counter() - t
        summary = json.loads((out / "summary.json").read_text())
        duck_s, duck = run_duckdb(path, threads=2)
        for kind in ("missing", "duplicates"):
            got = (summary["anomalies"][kind], int(duck[kind]), expected[kind])
            assert len(set(got)) == 1, (kind, got)
        overall = summary["overall"]
        assert (overall["late"], overall["late_end_to_end"]) == (
            duck["late"],
            duck["late_end_to_end"],
        )
        assert abs(overall["lateness_ms"]["p99"] - duck["p99"]) < 1e-6
        assert abs(overall["dispatch_lateness_ms"]["p99"] - duck["dispatch_p99"]) < 1e-6
        assert status == 0
        figures = (overall["lateness_ms"]["p99"], overall["dispatch_lateness_ms"]["p99"])
        late = (overall["late_end_to_end"], overall["late"])
        print(
            f"{n:,} records: p99 lateness {figures[0]:.1f} ms end to end, {figures[1]:.1f} ms "
            f"dispatch; late (> {LATE_MS} ms): {late[0]:,} end to end, {late[1]:,} dispatch"
        )
        rows.append((n, gen_s, spark_s, duck_s, expected))

    print(f"\nSpark session start-up (local[2], not in the timings below): {startup:.1f} s")
    head = (
        f"{'records':>11} {'gen s':>7} {'spark local[2] s':>17} {'spark rec/s':>12} "
        f"{'duckdb 2 thr s':>15} {'duckdb rec/s':>13} {'spark/duckdb':>13}"
    )
    print(head)
    print("-" * len(head))
    for n, gen_s, spark_s, duck_s, _ in rows:
        print(
            f"{n:>11,} {gen_s:>7.1f} {spark_s:>17.1f} {n / spark_s:>12,.0f} "
            f"{duck_s:>15.2f} {n / duck_s:>13,.0f} {spark_s / duck_s:>12.1f}x"
        )
    print(
        f"(generator v{args.generator}; answers cross-checked: missing, duplicates, late counts"
        " and overall p99 of both lateness measures agree between engines; gen s = 0 when the"
        " Parquet was cached)"
    )
    session.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
