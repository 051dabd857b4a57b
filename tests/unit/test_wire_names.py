"""The header names of the wire contract are spelled in one place (`foundation.wire`), which
takes the ones the compiled core parses from it: no server module writes one out again."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from foundation import wire

ROOT = Path(__file__).resolve().parents[2]
SERVER = ("foundation", "delay_service", "revive", "api", "cluster", "sidecar")
HEADER_NAME = re.compile(r"kpd-[a-z]+(-[a-z]+)*")
# Names of kpd's own consumer groups and threads, spelled where they are used: not headers.
NOT_HEADERS = {"kpd-state-follower", "kpd-arrival-watch", "kpd-offset-reader", "kpd-watermarks"}


def test_no_server_module_spells_a_kpd_header_name() -> None:
    spelled = {
        f"{path.relative_to(ROOT)}:{node.lineno}": node.value
        for package in SERVER
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != ROOT / "foundation" / "wire.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and HEADER_NAME.fullmatch(node.value)
        and node.value not in NOT_HEADERS
    }
    assert spelled == {}


def test_the_names_are_the_documented_contract() -> None:
    """docs/reference.md names them; a change here breaks every producer and consumer."""
    control = (wire.TARGET, wire.DELIVER_AT, wire.DELAY_MS, wire.ID, wire.CANCEL)
    assert control == ("kpd-target", "kpd-deliver-at", "kpd-delay-ms", "kpd-id", "kpd-cancel")
    copies = (wire.DELIVERY_COUNT, wire.ORIGIN_TOPIC, wire.ORIGIN_PARTITION, wire.ORIGIN_OFFSET)
    assert copies == (
        "kpd-delivery-count", "kpd-origin-topic", "kpd-origin-partition", "kpd-origin-offset",
    )  # fmt: skip
    assert (wire.ORIGIN_SEEK, wire.DLQ_REASON, wire.ERROR, wire.TRUNCATED) == (
        "kpd-origin-seek", "kpd-dlq-reason", "kpd-error", "kpd-truncated",
    )  # fmt: skip
