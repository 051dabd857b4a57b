"""What the broker was made to write: records and bytes per topic between two snapshots.

The broker shares the machine's CPU with kpd, so a benchmark reports what each delivered (or
scheduled) message costs it: records appended (data records and transaction markers alike, as
offsets count both) and bytes on disk (the segment files are the batches as sent, headers and
framing included). Bytes are read from the broker's data folder when the benchmark runs its own
local broker; against another broker only records are counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

# Written by the broker itself for transactions and offset commits: work a step causes too.
INTERNAL = ("__transaction_state", "__consumer_offsets")


@dataclass(frozen=True)
class Written:
    records: dict[str, int]
    bytes: dict[str, int] | None

    def minus(self, before: Written) -> Written:
        records = {t: n - before.records.get(t, 0) for t, n in self.records.items()}
        sizes = None
        if self.bytes is not None and before.bytes is not None:
            sizes = {t: n - before.bytes.get(t, 0) for t, n in self.bytes.items()}
        return Written(records, sizes)

    def per(self, count: int, label: str) -> str:
        """One line per topic that grew, and the total, per `count` messages."""
        lines = []
        for topic in sorted(self.records, key=lambda t: -self.records[t]):
            if self.records[topic] <= 0:
                continue
            size = f", {self.bytes[topic] / count:,.0f} B" if self.bytes is not None else ""
            lines.append(f"    {topic}: {self.records[topic] / count:.3f} records{size}")
        total_bytes = sum(self.bytes.values()) / count if self.bytes is not None else None
        total = f"{sum(self.records.values()) / count:.3f} records"
        if total_bytes is not None:
            total += f", {total_bytes:,.0f} B"
        return "\n".join([f"  per {label}: {total}", *lines])


def snapshot(bootstrap: str, topics: list[str], data_dir: Path | None) -> Written:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-broker-writes"})
    try:
        metadata = consumer.list_topics(timeout=10).topics
        records: dict[str, int] = {}
        for topic in [*topics, *INTERNAL]:
            if topic not in metadata:
                continue
            records[topic] = sum(
                consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in metadata[topic].partitions
            )
    finally:
        consumer.close()
    sizes = None
    if data_dir is not None and data_dir.is_dir():
        sizes = dict.fromkeys(records, 0)
        for segment in data_dir.glob("*/*.log"):
            topic, _, partition = segment.parent.name.rpartition("-")  # <topic>-<partition>
            if topic in sizes and partition.isdigit():
                sizes[topic] += segment.stat().st_size
    return Written(records, sizes)
