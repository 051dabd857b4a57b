"""The memory trim hands freed heap back to the system (glibc), where RSS shows it."""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import pytest

from foundation.memory_trim import MemoryTrim

MB = 1024 * 1024


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and /proc are Linux's")
def test_memory_freed_but_kept_by_malloc_goes_back_to_the_system() -> None:
    trim = MemoryTrim().trim
    assert trim is not None  # glibc on the machines kpd runs on
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    trim()
    # 200 MB in chunks small enough to come from the heap, touched so they count in RSS; the
    # last one stays allocated, so the heap cannot shrink from its top by itself.
    chunks = [libc.malloc(4096) for _ in range(50_000)]
    for chunk in chunks:
        ctypes.memset(chunk, 1, 4096)
    before = rss_bytes()
    for chunk in chunks[:-1]:
        libc.free(chunk)
    kept = rss_bytes()
    assert before - kept < 50 * MB  # freed, yet malloc kept most of it
    assert trim()
    assert kept - rss_bytes() > 150 * MB  # returned to the system
    libc.free(chunks[-1])
