"""The HTTP application: the token check and the body limit, the lean path of pop-group calls,
and the FastAPI application (routers, error handlers, the OpenAPI document)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline
from starlette.types import ASGIApp

from api import health, messages, pop, queue_ops, schedules, seek
from api.auth import DOCS_ASSETS, BearerAuth
from api.body_limit import BodyLimit
from api.hot_routes import HotRoutes
from api.node import Node
from api.openapi import document
from api.problems import install_problem_handlers
from cluster.routing.pop_router import PopRouter


def create_app(node: Node) -> ASGIApp:
    """The token check, then the body limit, then the lean path of pop-group calls, then
    FastAPI (`api.hot_routes`)."""

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
    # /docs and /redoc load their scripts from the sidecar (`DOCS_ASSETS`), not from a CDN.
    app = FastAPIOffline(title="kpd", version="1", lifespan=lifespan, static_url=DOCS_ASSETS)
    app.state.node = node
    app.state.pop_router = router = PopRouter(node)
    install_problem_handlers(app)
    app.include_router(health.router)
    app.include_router(messages.router)
    app.include_router(schedules.router)
    app.include_router(pop.router)
    app.include_router(queue_ops.router)
    app.include_router(seek.router)
    token = settings.api_token
    document(app, token_required=token is not None)
    limited = BodyLimit(
        HotRoutes(app, node, router),
        max_bytes=settings.max_request_bytes,
        timeout_s=settings.http_body_timeout_ms / 1000,
    )
    # The token is checked before any body is read.
    return BearerAuth(limited, token=None if token is None else token.get_secret_value().encode())
