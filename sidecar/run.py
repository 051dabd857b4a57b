"""`kpd run`: the sidecar behind a uvicorn server; SIGTERM/SIGINT stop both gracefully."""

from __future__ import annotations

import gc
import signal

import uvicorn

from api.app import create_app
from sidecar.config import Settings
from sidecar.logs import configure_logging
from sidecar.process import Sidecar


def run_sidecar(settings: Settings) -> int:
    configure_logging(settings.log_level, settings.log_format)
    # The leader keeps tens of thousands of small timer and lease objects alive; with the default
    # thresholds each full collection walks all of them, a pause that shows up as delivery
    # lateness. kpd makes few reference cycles, so collecting rarely costs little memory.
    gc.set_threshold(100_000, 50, 100)
    app = create_app(Sidecar(settings))
    # uvicorn installs the SIGTERM/SIGINT handlers: it stops accepting, drains requests, then
    # runs the app's lifespan shutdown, which stops the sidecar's threads in order.
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=settings.http_host,
            port=settings.http_port,
            log_level=settings.log_level.lower(),
            access_log=False,
            timeout_graceful_shutdown=10,
        )
    )
    # uvicorn re-raises the captured signal once it has shut down; the handlers installed here
    # are what it re-raises into, so a graceful stop exits 0 instead of dying by the signal.
    for stop_signal in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop_signal, lambda *_: None)
    server.run()
    return 0 if server.started else 1
