"""RFC 9457 problem responses: every error has a stable machine-readable `code`.

`ProblemCode` lists every code the server answers with; the OpenAPI document publishes it as an
enum and `tests/unit/test_problem_codes.py` checks that no other code is raised anywhere in `api/`.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

PROBLEM_JSON = "application/problem+json"
RETRY_AFTER_S = 1  # what a 503 "leadership is moving" tells clients to wait

ProblemCode = Literal[
    "bad_request",
    "unauthorized",
    "kpd_topic",
    "internal_topic",
    "not_found",
    "schedule_not_found",
    "topic_not_found",
    "group_not_found",
    "method_not_allowed",
    "request_timeout",
    "header_too_large",
    "already_delivered",
    "redrive_running",
    "group_in_use",
    "not_acked",
    "receipts_span_shards",
    "request_id_reused",
    "request_too_large",
    "record_too_large",
    "invalid_request",
    "internal_error",
    "not_ready",
    "leader_busy",
    "leader_starting",
    "no_leader",
    "not_leader",
    "leader_unreachable",
    "cancel_pending",
    "http_error",
]

# Starlette raises these itself (routing, body parsing); any other status it might raise gets
# the generic `http_error`.
_STARLETTE_CODES: dict[int, ProblemCode] = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
}


class Problem(Exception):
    def __init__(
        self,
        status: int,
        code: ProblemCode,
        detail: str,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail = status, code, detail
        self.headers, self.extra = headers, extra

    def response(self) -> JSONResponse:
        return problem_response(self.status, self.code, self.detail, self.headers, **self.extra)


def internal_error() -> JSONResponse:
    """What a call that raised answers: the traceback stays in the sidecar's log."""
    return problem_response(500, "internal_error", "internal error; see the sidecar log")


def leadership_moving(code: ProblemCode, detail: str, **extra: Any) -> Problem:
    """A 503 that clears up once a leader is in place: it says when to try again."""
    return Problem(503, code, detail, headers={"Retry-After": str(RETRY_AFTER_S)}, **extra)


def problem_body(status: int, code: ProblemCode, detail: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": f"https://kpd.dev/problems/{code}",
        "title": code.replace("_", " "),
        "status": status,
        "code": code,
        "detail": detail,
        **extra,
    }


def problem_response(
    status: int,
    code: ProblemCode,
    detail: str,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    body = problem_body(status, code, detail, **extra)
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def install_problem_handlers(app: FastAPI) -> None:
    @app.exception_handler(Problem)
    async def _problem(_: Request, exc: Problem) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {
                "field": ".".join(str(p) for p in e["loc"]),
                "message": e["msg"],
                **({"bounds": e["ctx"]} if e.get("ctx") else {}),
            }
            for e in exc.errors()
        ]
        return problem_response(
            422, "invalid_request", "request failed validation", errors=_jsonable(errors)
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _STARLETTE_CODES.get(exc.status_code, "http_error")
        headers = exc.headers
        if exc.status_code == 405:  # Starlette names the methods of the first route only
            headers = {"Allow": ", ".join(_allowed_methods(request))}
        return problem_response(exc.status_code, code, str(exc.detail), headers)

    @app.exception_handler(Exception)
    async def _crashed(_: Request, exc: Exception) -> JSONResponse:
        # Starlette logs the traceback; the client gets a problem, not a text/plain page.
        return internal_error()


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at this path (one route per method here)."""
    methods: set[str] = set()
    for route in request.app.routes:
        match, _ = route.matches(request.scope)
        if match is not Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return sorted(methods)


def _jsonable(value: Any) -> Any:
    """Validation contexts may hold exceptions or other objects; keep them as text."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)
