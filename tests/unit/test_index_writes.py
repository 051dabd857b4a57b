"""A call waiting for the schedule index wakes at the write it waits for (`api.index_writes`), not
at its next poll: a RocksDB write on another thread, as a delay leader or the standby makes it."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from api import schedules
from api.index_writes import IndexWrites
from foundation.store import Store

FAMILY = "schedules"


def test_a_waiting_call_wakes_at_the_index_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(schedules, "POLL_S", 30.0)  # only the wake-up can end the wait in time
    store = Store(tmp_path / "rocksdb", [FAMILY])
    writes = IndexWrites()
    store.on_write(writes.written)
    looked = threading.Event()  # the call has looked once, found nothing, and waits

    def get(schedule_id: str) -> bytes | None:
        found = store.get(FAMILY, schedule_id.encode())
        looked.set()
        return found

    node: Any = SimpleNamespace(schedules=SimpleNamespace(find=get), index_writes=writes)

    def write_later() -> None:
        assert looked.wait(10)
        batch = store.batch()
        batch.put(FAMILY, b"s-1", b"scheduled")
        store.write(batch)

    async def wait() -> tuple[bytes | None, float]:
        writes.bind(asyncio.get_running_loop())
        writer = threading.Thread(target=write_later)
        started = time.monotonic()
        writer.start()
        found = await schedules.wait_for_schedule(node, "s-1", lambda s: s is not None, 20.0)
        writer.join()
        return found, time.monotonic() - started

    try:
        found, waited_s = asyncio.run(wait())
    finally:
        store.close()
    assert found == b"scheduled"
    assert waited_s < 2.0  # the write came after the first look; the next poll after 30 s
