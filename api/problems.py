"""RFC 9457 problem responses: every error has a stable machine-readable `code`
(`foundation.problem`); tests/unit/test_http_rules.py checks that no other code is raised.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from foundation.problem import Problem, ProblemCode

PROBLEM_JSON = "application/problem+json"

# Starlette raises these itself (routing, body parsing); any other status it might raise gets
# the generic `http_error`.
_STARLETTE_CODES: dict[int, ProblemCode] = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
}


def respond(problem: Problem) -> JSONResponse:
    return problem_response(
        problem.status, problem.code, problem.detail, problem.headers, **problem.extra
    )


def internal_error() -> JSONResponse:
    """What a call that raised answers: the traceback stays in the sidecar's log."""
    return problem_response(500, "internal_error", "internal error; see the sidecar log")


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
        return respond(exc)

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
