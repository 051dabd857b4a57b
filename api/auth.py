"""The bearer-token check, in front of everything else.

It runs before the body limit and the app: a caller without the token is answered 401 before kpd
reads a byte of its body, so anonymous clients cannot make the server buffer uploads (and a wrong
token with a malformed body is a 401, not a 422). Every path needs the token except the open ones
below (health, readiness, metrics for probes and scrapers; the API docs).
"""

from __future__ import annotations

import hashlib
import hmac

from starlette.types import ASGIApp, Receive, Scope, Send

from api.problems import problem_response

# Where /docs and /redoc load Swagger UI's and ReDoc's files from (fastapi-offline's copies).
DOCS_ASSETS = "/docs-assets"
DOCS_FILES = ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js", "favicon.png")
OPEN_PATHS = frozenset(
    {"/healthz", "/readyz", "/metrics", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}
    | {f"{DOCS_ASSETS}/{name}" for name in DOCS_FILES}
)


def bearer_token_matches(headers: list[tuple[bytes, bytes]], token: bytes) -> bool:
    """Exactly one `Authorization: Bearer <token>` header whose token bytes equal `token`.

    The scheme is case-insensitive and may be followed by several spaces (RFC 6750); nothing else
    is trimmed, so a token followed by U+00A0 or any other byte is refused.
    """
    values = [value for name, value in headers if name == b"authorization"]
    if len(values) != 1:
        return False
    scheme, space, given = values[0].partition(b" ")
    if not space or scheme.lower() != b"bearer":
        return False
    # Digests have one length, so the comparison tells nothing about the token's length either.
    given_digest = hashlib.sha256(given.lstrip(b" ")).digest()
    return hmac.compare_digest(given_digest, hashlib.sha256(token).digest())


class BearerAuth:
    def __init__(self, app: ASGIApp, token: bytes | None) -> None:
        self.app, self.token = app, token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or self.token is None
            or scope["path"] in OPEN_PATHS
            or bearer_token_matches(scope["headers"], self.token)
        ):
            await self.app(scope, receive, send)
            return
        response = problem_response(
            401,
            "unauthorized",
            "missing or wrong bearer token",
            headers={"WWW-Authenticate": "Bearer"},
        )
        await response(scope, receive, send)
