"""What garbage collection cost a sidecar between two reads of its `kpd_gc_pause_seconds`.

A pause holds every thread of the worker, a shard leader's included, so a benchmark of lateness
prints them next to it: collections per generation, their total time, and how many of them were
long enough to show in a p99 (over 25 ms, a bucket boundary of the histogram).
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

LONG_S = "0.025"  # the histogram bucket that separates short pauses from long ones
ROUND_S = 1.1  # a worker moves the pauses it noted into its histogram once a second


@dataclass(frozen=True)
class Pauses:
    collections: dict[str, float]  # by generation
    seconds: dict[str, float]
    short: dict[str, float]  # collections within LONG_S

    def minus(self, before: Pauses) -> Pauses:
        def less(now: dict[str, float], then: dict[str, float]) -> dict[str, float]:
            return {g: n - then.get(g, 0.0) for g, n in now.items()}

        return Pauses(
            less(self.collections, before.collections),
            less(self.seconds, before.seconds),
            less(self.short, before.short),
        )

    def total_s(self) -> float:
        return sum(self.seconds.values())

    def row(self) -> str:
        if not self.collections:
            return "no kpd_gc_pause_seconds exported"
        return ", ".join(
            f"gen{g} {self.collections[g]:,.0f} in {self.seconds[g] * 1000:,.0f} ms "
            f"({self.collections[g] - self.short[g]:,.0f} over {float(LONG_S) * 1000:.0f} ms)"
            for g in sorted(self.collections)
        )


def read(url: str) -> Pauses:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    pauses = Pauses({}, {}, {})
    for family in text_string_to_metric_families(text):
        if family.name != "kpd_gc_pause_seconds":
            continue
        for sample in family.samples:
            generation = sample.labels["generation"]
            if sample.name.endswith("_count"):
                pauses.collections[generation] = sample.value
            elif sample.name.endswith("_sum"):
                pauses.seconds[generation] = sample.value
            elif sample.labels.get("le") == LONG_S:
                pauses.short[generation] = sample.value
    return pauses
