"""Command-line options of `kpd audit`, each checked at the boundary (type, range, shape)."""

from __future__ import annotations

import argparse
import datetime as dt
import re
from typing import Any, NoReturn

from foundation.config import TOPIC_PATTERN

THRESHOLDS = {  # kind → (option, default); -1 means "no limit"
    "early": ("max_early", 0),
    "missing": ("max_missing", 0),
    "duplicates": ("max_duplicates", 0),
    "late": ("max_late", -1),
    "malformed": ("max_malformed", 0),
}
MAX_TIME_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
MAX_DURATION_MS = 100 * 365 * 24 * 3600 * 1000
MAX_COUNT = 2**62


class UsageError(Exception):
    """Bad command line or settings: exit status 1 (2 means "anomalies found")."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def parse_time(text: str) -> int:
    """Epoch milliseconds or ISO-8601 (naive = UTC) → epoch ms, 1970 to 9999."""
    text = text.strip()
    if re.fullmatch(r"-?\d{1,20}", text):
        when_ms = int(text)
    else:
        try:
            when = dt.datetime.fromisoformat(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"not epoch ms nor ISO-8601: {text[:100]!r}") from exc
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        when_ms = int(when.timestamp() * 1000)
    if not 0 <= when_ms <= MAX_TIME_MS:
        raise argparse.ArgumentTypeError(f"{text[:100]!r} is not between 1970 and 9999")
    return when_ms


def _bounded(low: int, high: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text[:100]!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not in {low}..{high}")
        return value

    return parse


def _matching(pattern: str, what: str) -> Any:
    def parse(text: str) -> str:
        if not re.fullmatch(pattern, text):
            raise argparse.ArgumentTypeError(f"{text[:100]!r} is not {what}")
        return text

    return parse


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text[:100]!r}")
    return key, value


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="kpd audit", description="Audit the kpd delivery log with Spark.")
    src = p.add_argument_group(
        "source (Kafka unless --input; bootstrap and topic default to the settings of `kpd run`:"
        " kpd.toml or KPD_CONFIG, KPD_BOOTSTRAP, KPD_DELIVERY_LOG_TOPIC)"
    )
    src.add_argument(
        "--bootstrap",
        type=_matching(r"[^\s,]{1,255}(,[^\s,]{1,255}){0,63}", "a host:port list"),
        help="Kafka bootstrap servers (default: settings, else 127.0.0.1:9092)",
    )
    src.add_argument(
        "--topic",
        type=_matching(TOPIC_PATTERN, "a Kafka topic name"),
        help="delivery log topic (default: settings, else kpd.delivery-log)",
    )
    src.add_argument("--input", help="exported log instead of Kafka: JSON lines or Parquet")
    src.add_argument("--since", type=parse_time, help="first at_ms (epoch ms or ISO-8601)")
    src.add_argument("--until", type=parse_time, help="last at_ms; also the audit's end time")
    src.add_argument("--starting-offsets", help="Spark JSON offsets (overrides --since pushdown)")
    src.add_argument("--ending-offsets", help="Spark JSON offsets (overrides --until pushdown)")
    src.add_argument(
        "--kafka-option",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Kafka client setting, e.g. security.protocol=SASL_SSL (repeatable)",
    )
    p.add_argument("--out", required=True, help="output folder (created)")
    p.add_argument("--master", default="local[*]", help="Spark master for a local session")
    p.add_argument(
        "--driver-memory",
        default="2g",
        type=_matching(r"\d{1,6}[kKmMgGtT]?", "a JVM memory size such as 2g"),
        help="driver memory of a local session",
    )
    durations = _bounded(0, MAX_DURATION_MS)
    p.add_argument(
        "--late-threshold-ms",
        type=durations,
        default=1000,
        help="a delivery is late when its dispatch lateness exceeds this (1000)",
    )
    p.add_argument("--grace-ms", type=durations, default=60_000)
    p.add_argument(
        "--list-limit",
        type=_bounded(0, 10_000_000),
        default=100_000,
        help="rows per anomaly table (100000)",
    )
    for kind, (dest, default) in THRESHOLDS.items():
        p.add_argument(
            f"--{dest.replace('_', '-')}",
            dest=dest,
            type=_bounded(-1, MAX_COUNT),
            default=default,
            help=f"most {kind} anomalies allowed before exit status 2 (-1: no limit; {default})",
        )
    return p
