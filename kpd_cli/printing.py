"""What the Kafka verbs print: JSON lines (`--json`) or a table, and their exit codes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from kpd_client.cli_table import table

DONE, FAILED, USAGE = 0, 1, 2  # as the client verbs' (kpd_client.cli_verbs)


def print_rows(rows: Sequence[dict[str, Any]], as_json: bool, empty: str) -> None:
    """One JSON line per row, or a table with the rows' keys upper-cased as its header."""
    if as_json:
        for row in rows:
            print(json.dumps(row, ensure_ascii=False))
    elif not rows:
        print(empty)
    else:
        header = list(rows[0])
        print(table([h.upper() for h in header], [[_cell(r[h]) for h in header] for r in rows]))


def _cell(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)
