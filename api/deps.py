"""Dependencies shared by the /v1 routers: the sidecar, and the bearer-token check."""

from __future__ import annotations

import hmac

from fastapi import Request

from api.problems import Problem
from sidecar.process import Sidecar


def get_sidecar(request: Request) -> Sidecar:
    sidecar: Sidecar = request.app.state.sidecar
    return sidecar


def require_token(request: Request) -> None:
    """With KPD_API_TOKEN set, every /v1 call needs `Authorization: Bearer <token>`."""
    token = get_sidecar(request).settings.api_token
    if token is None:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    expected = token.get_secret_value().encode()
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected):
        raise Problem(
            401,
            "unauthorized",
            "missing or wrong bearer token",
            headers={"WWW-Authenticate": "Bearer"},
        )
