"""Counts the Python calls of a process, by function, for `bench/burst_calls.py`.

Python imports `sitecustomize` at start-up from the path; that bench puts this folder on the
PYTHONPATH of a sidecar, whose worker processes inherit it. With BENCH_CALLS_DIR set, every
thread of the process runs under cProfile, and SIGUSR2 writes the calls made so far, by function,
to BENCH_CALLS_DIR/<pid>.json. Only the counts are used: unlike CPU seconds, they do not depend
on how fast this machine runs a process at the time.
"""

from __future__ import annotations

import cProfile
import json
import os
import signal
import threading
from collections import Counter
from pathlib import Path
from types import CodeType, FrameType

_PROFILERS: list[cProfile.Profile] = []


def _label(code: CodeType | str) -> str:
    if isinstance(code, str):  # a built-in function or method
        return code
    return (
        f"{code.co_filename.rsplit('site-packages/', 1)[-1]}:{code.co_firstlineno}({code.co_name})"
    )


def _write(signum: int, frame: FrameType | None) -> None:
    _PROFILERS[0].disable()  # the main thread's, where this runs: its own calls are not counted
    calls: Counter[str] = Counter()
    for profiler in list(_PROFILERS):
        for entry in profiler.getstats():
            calls[_label(entry.code)] += entry.callcount
    folder = Path(os.environ["BENCH_CALLS_DIR"])
    partial = folder / f"{os.getpid()}.partial"
    partial.write_text(json.dumps(calls))
    partial.rename(folder / f"{os.getpid()}.json")  # whole or absent to the reader
    _PROFILERS[0].enable()


def _profile_threads() -> None:
    run_thread = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]

    def profiled(thread: threading.Thread) -> None:
        profiler = cProfile.Profile()
        _PROFILERS.append(profiler)
        profiler.enable()
        try:
            run_thread(thread)
        finally:
            profiler.disable()

    main = cProfile.Profile()
    _PROFILERS.append(main)
    threading.Thread._bootstrap_inner = profiled  # type: ignore[attr-defined]
    main.enable()
    signal.signal(signal.SIGUSR2, _write)


if os.environ.get("BENCH_CALLS_DIR"):
    _profile_threads()
