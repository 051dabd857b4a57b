"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api.problems import problem_response
from sidecar.process import Sidecar

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """The process is up and serving HTTP; says nothing about Kafka (that is /readyz)."""
    return {"status": "ok"}


@router.get("/readyz", response_model=None)
def readyz(request: Request) -> Response | dict[str, str]:
    sidecar: Sidecar = request.app.state.sidecar
    reasons = sidecar.not_ready_reasons()
    if reasons:
        return problem_response(503, "not_ready", "; ".join(reasons), reasons=reasons)
    return {"status": "ready", "node": sidecar.settings.node_id}


@router.get("/metrics")
def metrics() -> Response:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
