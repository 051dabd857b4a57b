"""`kpd run`: a small supervisor process and its worker processes.

The supervisor binds the HTTP port once and starts `KPD_WORKERS` worker processes that all accept
on it (pre-fork, as gunicorn does); each worker is a full sidecar (`sidecar.run.run_worker`): a
member of the shard group with its own GIL, shards, RocksDB and, when there are several, its own
port for calls other sidecars forward to it, and a node id `<KPD_NODE_ID>-<index>`. Their metrics
are served together on any of them (a shared folder: prometheus_client's multiprocess mode). A
worker that exits is started again, after a backoff if it keeps dying young: that is how a
worker whose loop stalled for good (it exits on purpose, `Sidecar._exit_for_restart`) or whose Kafka
clients stayed broken (`sidecar.self_heal`) comes back fresh. SIGTERM or SIGINT stop the workers
within a bound; a worker still running past it is killed. Workers die with the supervisor
(PR_SET_PDEATHSIG), so a SIGKILL of `kpd run` is a crash of the whole sidecar, as it should be.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import structlog
from prometheus_client.multiprocess import mark_process_dead

from foundation.config import Settings
from foundation.logs import configure_logging

log = structlog.get_logger(__name__)

MULTIPROCESS = "PROMETHEUS_MULTIPROC_DIR"
SHUTDOWN_BOUND_S = 20.0  # a worker gets this long to stop; then it is killed
YOUNG_S = 30.0  # a worker that dies younger than this is restarted after a growing backoff
BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
STARTED = "started-"  # a file per worker that has been ready once, in the shared folder


@dataclass
class Worker:
    index: int
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    quick_deaths: int = 0
    restart_at: float = field(default=0.0)


class StartedWorkers:
    """The workers of this sidecar that have been ready once, as files in the folder the
    supervisor shares with them (its metrics folder, fresh per run). `/readyz` answers ready
    only once every worker has been: health checks reach whichever worker accepts, so `make up`
    and compose saw a sidecar ready while another worker was still starting. A worker that
    restarts later stays counted (the others take its shards meanwhile)."""

    def __init__(self, index: int, workers: int) -> None:
        self.index = index
        folder = os.environ.get(MULTIPROCESS) if workers > 1 else None
        self._folder = Path(folder) if folder else None
        self._mine = f"{STARTED}{index}"
        self._workers = workers
        self._marked = False

    def not_started(self, ready_here: bool) -> int:
        """How many workers have not been ready yet; this one counts once `ready_here`."""
        if self._folder is None:
            return 0
        if ready_here and not self._marked:
            (self._folder / self._mine).touch()
            self._marked = True
        return self._workers - sum(1 for _ in self._folder.glob(f"{STARTED}*"))


def run_sidecar(settings: Settings) -> int:
    """`kpd run`: supervise the workers until stopped."""
    configure_logging(settings.log_level, settings.log_format)
    return WorkerSupervisor(settings).run()


class WorkerSupervisor:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._stopping = False
        self._listener: socket.socket | None = None
        self._workers = [Worker(i) for i in range(settings.workers)]
        self._metrics_dir: str | None = None

    def run(self) -> int:
        if self._settings.workers > 1:
            self._metrics_dir = tempfile.mkdtemp(prefix="kpd-metrics-")
            os.environ[MULTIPROCESS] = self._metrics_dir  # the workers inherit it
        try:
            return self._supervise()
        finally:
            if self._metrics_dir is not None:
                shutil.rmtree(self._metrics_dir, ignore_errors=True)

    def _supervise(self) -> int:
        try:
            self._listener = socket.create_server(
                (self._settings.http_host, self._settings.http_port), backlog=2048
            )
        except OSError as error:
            print(
                f"kpd: cannot listen on {self._settings.http_host}:{self._settings.http_port}: "
                f"{error}",
                file=sys.stderr,
            )
            return 1
        self._listener.set_inheritable(True)
        wake = self._wake_on_signals()
        for worker in self._workers:
            self._spawn(worker)
        while True:
            now = time.monotonic()
            for worker in self._workers:
                self._watch(worker, now)
            if self._stopping and all(w.process is None for w in self._workers):
                return 0
            select.select([wake], [], [], self._next_wake(now))
            with contextlib.suppress(BlockingIOError):
                os.read(wake, 512)

    def _wake_on_signals(self) -> int:
        """A pipe that gets a byte when a worker exits (SIGCHLD) or a stop signal comes: the
        loop sleeps on it, so a supervisor with nothing to do does nothing."""
        wake, woken = os.pipe()
        os.set_blocking(wake, False)
        os.set_blocking(woken, False)
        signal.set_wakeup_fd(woken)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the signal is delivered
        for stop_signal in (signal.SIGTERM, signal.SIGINT):
            signal.signal(stop_signal, self._stop)
        return wake

    def _next_wake(self, now: float) -> float | None:
        """Seconds until a timer of the loop's is due (a restart, the stop bound); None: none."""
        if self._stopping:  # past the bound the workers are killed: their exits wake the loop
            left = self._stop_time + SHUTDOWN_BOUND_S - now
            return left if left >= 0 else None
        restarts = [w.restart_at for w in self._workers if w.process is None]
        return max(0.0, min(restarts) - now) if restarts else None

    def _spawn(self, worker: Worker) -> None:
        assert self._listener is not None
        fd = self._listener.fileno()
        worker.process = subprocess.Popen(
            [sys.executable, "-m", "sidecar", "worker", str(worker.index), str(fd)],
            pass_fds=(fd,),
        )
        worker.started = time.monotonic()

    def _watch(self, worker: Worker, now: float) -> None:
        process = worker.process
        if process is None:
            if not self._stopping and now >= worker.restart_at:
                self._spawn(worker)
            return
        code = process.poll()
        if code is None:
            if self._stopping and now - self._stop_time > SHUTDOWN_BOUND_S:
                log.error("worker did not stop in time; killing it", worker=worker.index)
                process.kill()
            return
        worker.process = None
        if self._metrics_dir is not None:  # its live gauges no longer count
            mark_process_dead(process.pid, self._metrics_dir)
        if self._stopping:
            return
        young = now - worker.started < YOUNG_S
        worker.quick_deaths = worker.quick_deaths + 1 if young else 0
        delay = BACKOFF_S[min(worker.quick_deaths, len(BACKOFF_S) - 1)] if young else 0.0
        worker.restart_at = now + delay
        log.warning("worker exited; starting it again", worker=worker.index, code=code, in_s=delay)

    def _stop(self, signum: int, _: FrameType | None) -> None:
        if self._stopping:
            return
        self._stopping, self._stop_time = True, time.monotonic()
        for worker in self._workers:
            if worker.process is not None and worker.process.poll() is None:
                worker.process.send_signal(signal.SIGTERM)
