"""`kpd groups GROUP` as text tables for a terminal (`--json` prints the API's answer instead)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns, two spaces apart."""
    cells = [list(header), *([str(cell) for cell in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in cells
    )


def group_table(stats: dict[str, Any]) -> str:
    """Config, then one row per topic and one per partition."""
    config = stats.get("config") or {}
    topics: dict[str, Any] = stats.get("topics") or {}
    summary = table(
        ["GROUP", str(stats.get("group"))],
        [
            ["answered by", stats.get("node")],
            *([name, _setting(value)] for name, value in config.items()),
            ["dead_lettered", stats.get("dead_lettered", 0)],
        ],
    )
    if not topics:
        return f"{summary}\n\nno topics popped by this group since its leader started"
    per_topic = table(
        ["TOPIC", "AVAILABLE", "IN_FLIGHT", "RETRYING", "LAG"],
        [
            [
                name,
                topic.get("available"),
                topic.get("in_flight"),
                topic.get("retrying"),
                sum(p.get("lag", 0) for p in (topic.get("partitions") or {}).values()),
            ]
            for name, topic in topics.items()
        ],
    )
    per_partition = table(
        ["TOPIC", "PARTITION", "COMMITTED", "LAG"],
        [
            [name, partition, _committed(numbers.get("committed")), numbers.get("lag")]
            for name, topic in topics.items()
            for partition, numbers in sorted(
                (topic.get("partitions") or {}).items(), key=lambda item: int(item[0])
            )
        ],
    )
    return f"{summary}\n\n{per_topic}\n\n{per_partition}"


def _setting(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(str(item) for item in value)
    return str(value)


def _committed(offset: Any) -> object:
    """Kafka answers a negative offset (-1001) for a partition with no commit yet."""
    return "none" if isinstance(offset, int) and offset < 0 else offset
