"""The FastAPI application: routers, error handlers, auth and body limits."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from api import health, messages, pop, schedules
from api.auth import BearerAuth
from api.body_limit import BodyLimit
from api.node import Node
from api.openapi import document
from api.pop_router import PopRouter
from api.problems import install_problem_handlers


def create_app(node: Node) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        node.availability.bind(loop)
        node.index_writes.bind(loop)
        node.start()
        try:
            yield
        finally:
            await node.http.aclose()
            node.stop()

    settings = node.settings
    app = FastAPI(title="kpd", version="1", lifespan=lifespan)
    app.state.node = node
    app.state.pop_router = PopRouter(node)
    install_problem_handlers(app)
    # The last middleware added runs first: the token check before any body is read.
    app.add_middleware(
        BodyLimit,
        max_bytes=settings.max_request_bytes,
        timeout_s=settings.http_body_timeout_ms / 1000,
    )
    token = settings.api_token
    app.add_middleware(
        BearerAuth, token=None if token is None else token.get_secret_value().encode()
    )
    app.include_router(health.router)
    app.include_router(messages.router)
    app.include_router(schedules.router)
    app.include_router(pop.router)
    document(app, token_required=token is not None)
    return app
