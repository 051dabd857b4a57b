"""Liveness, readiness and Prometheus metrics: open to probes and scrapers (no token)."""

from __future__ import annotations

import os

from fastapi import APIRouter, Request, Response
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from api.node import Node
from api.openapi import problems
from api.problems import problem_response

router = APIRouter(tags=["health"])
MULTIPROCESS = "PROMETHEUS_MULTIPROC_DIR"


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up and serving HTTP; says nothing about Kafka (that is /readyz). Answered
    on the event loop itself: a peer's probe asks whether this worker can answer calls."""
    return {"status": "ok"}


@router.get("/readyz", response_model=None, responses=problems(503))
def readyz(request: Request) -> Response | dict[str, str]:
    node: Node = request.app.state.node
    reasons = node.not_ready_reasons()
    if reasons:
        return problem_response(503, "not_ready", "; ".join(reasons), reasons=reasons)
    return {"status": "ready", "node": node.settings.node_id}


@router.get("/metrics", response_class=PlainTextResponse)
def metrics() -> Response:
    """Prometheus text exposition format: of every worker of this sidecar, when it has several
    (`kpd run` then gives them a shared metrics folder: prometheus_client's multiprocess mode)."""
    if MULTIPROCESS in os.environ:
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
