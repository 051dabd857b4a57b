"""Each worker of `kpd run`: a sidecar behind a uvicorn server (the supervisor, which imports
none of this, is `sidecar.workers`).

SIGTERM/SIGINT stop a worker gracefully, within `SHUTDOWN_BOUND_S`: a Kafka call that hangs
(librdkafka #5456) cannot hold the process, which exits anyway once the bound is reached.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import socket
import sys
import threading
from types import FrameType

import uvicorn

from api.app import create_app
from api.slow_clients import guarded_protocol
from foundation.config import Settings
from foundation.garbage_collection import freeze_startup_objects
from foundation.logs import configure_logging
from sidecar.process import Sidecar
from sidecar.workers import SHUTDOWN_BOUND_S, StartedWorkers

PR_SET_PDEATHSIG = 1
EXIT_FORCED = 70  # the graceful stop did not finish within its bound


def run_worker(settings: Settings, index: int, listen_fd: int) -> int:
    _die_with_parent()
    sockets = [socket.socket(fileno=listen_fd)]  # the sidecar's port, shared by its workers
    url = None
    if settings.workers > 1:  # and a port of its own, for calls forwarded to this worker
        port = settings.worker_port_base + index if settings.worker_port_base else 0
        sockets.append(socket.create_server((settings.http_host, port), backlog=2048))
        url = f"http://{settings.advertised_host}:{sockets[-1].getsockname()[1]}"
    settings = settings.for_worker(index)
    configure_logging(settings.log_level, settings.log_format)
    app = create_app(Sidecar(settings, url, StartedWorkers(index, settings.workers)))
    # Python's default GC thresholds: what a worker holds for long (wheel entries, window
    # schedules, fetched and handed-out pop records) is untracked by the collector, and the
    # objects the worker built at startup are frozen out of it, so collections stay short
    # .
    freeze_startup_objects()
    # uvicorn installs the SIGTERM/SIGINT handlers: it stops accepting, drains requests, then
    # runs the app's lifespan shutdown, which stops the sidecar's threads in order.
    server = _BoundedServer(
        uvicorn.Config(
            app,
            log_level=settings.log_level.lower(),
            access_log=False,
            proxy_headers=False,  # kpd reads neither the client's address nor the scheme
            timeout_graceful_shutdown=10,
            # Slow clients: bounded idle time between requests, head time and size here, body
            # time and size in the app (api.body_limit).
            timeout_keep_alive=settings.http_keep_alive_ms / 1000,  # type: ignore[arg-type]
            http=guarded_protocol(
                settings.http_header_timeout_ms / 1000, settings.http_max_header_bytes
            ),
        )
    )
    # uvicorn re-raises the captured signal once it has shut down; the handlers installed here
    # are what it re-raises into, so a graceful stop exits 0 instead of dying by the signal.
    for stop_signal in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop_signal, lambda *_: None)
    server.run(sockets=sockets)
    return 0 if server.started else 1


class _BoundedServer(uvicorn.Server):
    _exit: asyncio.Event | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    async def main_loop(self) -> None:
        """Wait for a stop, and for nothing else. uvicorn's own loop wakes 10 times a second to
        look for one and to renew the Date header; requests renew that (`api.slow_clients`)."""
        await self.on_tick(0)  # the first Date header
        self._loop, self._exit = asyncio.get_running_loop(), asyncio.Event()
        while not self.should_exit:  # a stop asked before the event existed is seen here
            await self._exit.wait()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        deadline = threading.Timer(SHUTDOWN_BOUND_S - 2, os._exit, args=(EXIT_FORCED,))
        deadline.daemon = True
        deadline.start()
        super().handle_exit(sig, frame)
        if self._loop is not None and self._exit is not None:
            self._loop.call_soon_threadsafe(self._exit.set)


def _die_with_parent() -> None:
    """Linux: the kernel kills this worker when the supervisor dies, however it dies."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:  # the supervisor died before the line above took effect
        os._exit(1)
