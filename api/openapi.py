"""The OpenAPI document matches the server: every error answer, the bearer scheme.

Routes declare the problem statuses they can answer with `problems(...)`; `document` adds the
`Problem` schema (its `code` is the `ProblemCode` enum) and the `bearerAuth` scheme, applied to
every operation the token guards (`api.auth`) when a token is configured.
`tests/integration/test_openapi_conformance.py` runs schemathesis against a real sidecar to keep
both in step.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field

from api.auth import OPEN_PATHS
from api.problems import PROBLEM_JSON
from foundation.problem import RETRY_AFTER_S, ProblemCode

_WHEN = {
    400: "The body cannot be parsed (`bad_request`).",
    401: "Missing or wrong bearer token (`unauthorized`), when `KPD_API_TOKEN` is set.",
    403: "The topic belongs to kpd (`kpd_topic`) or is internal to Kafka (`internal_topic`).",
    404: "No such schedule (`schedule_not_found`), topic (`topic_not_found`) or group that ever "
    "popped (`group_not_found`), or no such path (`not_found`).",
    408: "The request head or body did not arrive in time (`request_timeout`).",
    409: "The schedule was delivered before the cancel (`already_delivered`), a newer redrive "
    "of the group stopped this one (`redrive_running`), or consumers other than kpd's are "
    "members of the group being deleted (`group_in_use`).",
    413: "The body (`request_too_large`) or a record (`record_too_large`) is over its limit.",
    422: "The request failed validation (`invalid_request`); `errors` names each field and its "
    "bounds.",
    431: "The request head is over `KPD_HTTP_MAX_HEADER_BYTES` (`header_too_large`).",
    503: "Leadership is moving (`leader_starting`, `no_leader`, `not_leader`, "
    "`leader_unreachable`, `cancel_pending`: retry after `Retry-After` seconds), the pop service "
    "is overloaded (`leader_busy`), or the node is not ready (`not_ready`).",
}
_HEADERS: dict[int, dict[str, Any]] = {
    401: {"WWW-Authenticate": {"description": "`Bearer`", "schema": {"type": "string"}}},
    503: {
        "Retry-After": {
            "description": f"seconds to wait ({RETRY_AFTER_S}) when leadership is moving",
            "schema": {"type": "integer", "minimum": 0},
        }
    },
}
# Every guarded operation can answer these: the token check, the head bounds, path validation
# (a path that no route serves, e.g. after dot segments, is a 404 `not_found`).
GUARDED = (401, 404, 408, 422, 431)
WITH_BODY = (400, 408, 413)


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for these problem statuses, in `application/problem+json`."""
    return {
        status: {
            "description": _WHEN[status],
            "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
            **({"headers": _HEADERS[status]} if status in _HEADERS else {}),
        }
        for status in statuses
    }


class FieldError(BaseModel):
    field: str = Field(description="where: `body.items.0.receipt`, `path.topic`, ...")
    message: str
    bounds: dict[str, Any] | None = Field(None, description='the limits, e.g. `{"ge": 1}`')


class Problem(BaseModel):
    """RFC 9457 problem details; `code` is stable, `detail` is for humans."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    code: ProblemCode
    detail: str
    errors: list[FieldError] | None = Field(None, description="invalid_request")
    field: str | None = Field(None, description="record_too_large: which message")
    max_bytes: int | None = Field(None, description="request_too_large, record_too_large")
    reasons: list[str] | None = Field(None, description="not_ready")
    id: str | None = Field(None, description="cancel_pending: the schedule id")
    delivered_at_ms: int | None = Field(None, description="already_delivered")


def document(app: FastAPI, token_required: bool) -> None:
    """Serve an OpenAPI document with the problem schema and the bearer scheme; operations
    require the scheme only when this server checks a token (the document says what it does)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = get_openapi(title=app.title, version=app.version, routes=app.routes)
            components = spec.setdefault("components", {})
            problem = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
            schemas = components.setdefault("schemas", {})
            schemas.update(problem.pop("$defs", {}))
            schemas["Problem"] = problem
            components["securitySchemes"] = {"bearerAuth": {"type": "http", "scheme": "bearer"}}
            for path, operations in spec["paths"].items():
                if token_required and path not in OPEN_PATHS:
                    for operation in operations.values():
                        operation["security"] = [{"bearerAuth": []}]
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
