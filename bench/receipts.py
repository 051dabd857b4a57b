"""Benchmark of receipt format 2 (one HMAC per segment of a pop batch) against format 1 (one HMAC
per receipt), both measured in this run, in this process, with the same codec.

    .venv/bin/python bench/receipts.py
    .venv/bin/python bench/receipts.py --seconds 1.0 --sizes 1,10,100,1000

For each batch layout and size, receipts/s of:
  * encode: format 1 = one `encode(Receipt)` per message (what `Leaser.lease` did), format 2 =
    one `encode_batch` per checkpoint (what it does now);
  * decode: every receipt of a batch decoded one by one, as an ack call does, each batch a
    different checkpoint and each pass a fresh codec, so every segment is verified once (a cold
    cache, the cost an ack of a new batch pays);
and the receipt length in characters and format 2's HMACs per batch (its distinct segments).
Layouts: `contiguous` = consecutive offsets, delivery count 1 (a pop of an origin topic written
without transactions); `worst` = every other offset (one-record transactions leave a marker
between records) with a random delivery count in 1..16 (retry topics), so every message starts a
run and a segment holds 8. Each figure is the median of --repeats timed passes of at least
--seconds.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from revive.receipt import Receipt, ReceiptCodec

SECRET = b"bench-receipt-secret-0123456789"
GROUP, TOPIC, PARTITION = "orders-workers", "orders.events-v1", 7
FIRST_OFFSET = 48_213_907  # a partition some way into its life: offsets take 5 msgpack bytes
FIRST_CHECKPOINT = 1_204_551
Batch = tuple[int, list[int], list[int]]  # (checkpoint id, offsets, counts)


def layout(name: str, size: int, checkpoint_id: int, rng: random.Random) -> Batch:
    if name == "contiguous":
        return checkpoint_id, list(range(FIRST_OFFSET, FIRST_OFFSET + size)), [1] * size
    offsets = list(range(FIRST_OFFSET, FIRST_OFFSET + 2 * size, 2))
    return checkpoint_id, offsets, [rng.randint(1, 16) for _ in range(size)]


def encode_v1(codec: ReceiptCodec, batch: Batch) -> list[str]:
    checkpoint_id, offsets, counts = batch
    return [
        codec.encode(Receipt(GROUP, TOPIC, PARTITION, offset, checkpoint_id, count))
        for offset, count in zip(offsets, counts, strict=True)
    ]


def encode_v2(codec: ReceiptCodec, batch: Batch) -> list[str]:
    return codec.encode_batch(GROUP, TOPIC, PARTITION, *batch)


def rate(run_once: Callable[[], int], seconds: float, repeats: int) -> float:
    """Median items/s of ``repeats`` passes, each calling ``run_once`` for at least ``seconds``."""
    rates = []
    for _ in range(repeats):
        items, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            items += run_once()
        rates.append(items / elapsed)
    return statistics.median(rates)


def measure(name: str, size: int, seconds: float, repeats: int) -> dict[str, float]:
    rng = random.Random(size)
    # Enough distinct checkpoints that a decode pass covers ~2000 receipts, all cold.
    batches = [layout(name, size, FIRST_CHECKPOINT + i, rng) for i in range(max(1, 2000 // size))]
    codec = ReceiptCodec(SECRET)
    out: dict[str, float] = {}
    for version, encode in (("v1", encode_v1), ("v2", encode_v2)):
        out[f"{version} encode"] = rate(
            lambda e=encode: len(e(codec, batches[0])), seconds, repeats
        )
        issued = [encode(codec, batch) for batch in batches]

        def decode_all(issued: list[list[str]] = issued) -> int:
            fresh = ReceiptCodec(SECRET)  # cold: nothing verified yet, as on a new checkpoint
            for texts in issued:
                for text in texts:
                    fresh.decode(text, group=GROUP)
            return sum(map(len, issued))

        out[f"{version} decode"] = rate(decode_all, seconds, repeats)
        lengths = [len(t) for t in issued[0]]
        out[f"{version} chars"] = statistics.mean(lengths)
        out[f"{version} max chars"] = max(lengths)
    out["v2 hmacs"] = len({text[4:] for text in issued[0]})  # distinct segments
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1,10,100,1000")
    parser.add_argument("--seconds", type=float, default=0.5, help="per timed pass")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"== receipt codec, format 1 vs format 2, one process: {started} ==")
    print(
        f"python {platform.python_version()}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.2f}; topic {TOPIC!r}, group {GROUP!r}"
    )
    header = (
        f"{'layout':<11}{'batch':>6}{'v1 enc/s':>11}{'v2 enc/s':>11}{'x':>6}"
        f"{'v1 dec/s':>11}{'v2 dec/s':>11}{'x':>6}{'v1 chars':>10}{'v2 chars':>14}{'v2 HMACs':>10}"
    )
    print(header)
    for name in ("contiguous", "worst"):
        for size in sizes:
            m = measure(name, size, args.seconds, args.repeats)
            v2_chars = f"{m['v2 chars']:.0f} (max {m['v2 max chars']})"
            print(
                f"{name:<11}{size:>6}{m['v1 encode']:>11,.0f}{m['v2 encode']:>11,.0f}"
                f"{m['v2 encode'] / m['v1 encode']:>6.1f}{m['v1 decode']:>11,.0f}"
                f"{m['v2 decode']:>11,.0f}{m['v2 decode'] / m['v1 decode']:>6.1f}"
                f"{m['v1 chars']:>10.0f}{v2_chars:>14}{m['v2 hmacs']:>10.0f}"
            )
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
