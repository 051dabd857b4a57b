"""The FastAPI application: routers, error handlers, auth and body limits."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from api import health
from api.problems import install_problem_handlers
from sidecar.process import Sidecar


def create_app(sidecar: Sidecar) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        sidecar.start()
        try:
            yield
        finally:
            sidecar.stop()

    app = FastAPI(title="kpd", version="1", lifespan=lifespan)
    app.state.sidecar = sidecar
    install_problem_handlers(app)
    app.include_router(health.router)
    return app
