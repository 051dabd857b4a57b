"""The FastAPI application: routers, error handlers, auth and body limits."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from api import health, messages, pop, schedules
from api.body_limit import BodyLimit
from api.problems import install_problem_handlers
from sidecar.process import Sidecar


def create_app(sidecar: Sidecar) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        sidecar.start()
        try:
            yield
        finally:
            await sidecar.http.aclose()
            sidecar.stop()

    app = FastAPI(title="kpd", version="1", lifespan=lifespan)
    app.state.sidecar = sidecar
    install_problem_handlers(app)
    app.add_middleware(BodyLimit, max_bytes=sidecar.settings.max_request_bytes)
    app.include_router(health.router)
    app.include_router(messages.router)
    app.include_router(schedules.router)
    app.include_router(pop.router)
    return app
