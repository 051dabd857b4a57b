"""A call kpd refuses: its HTTP status and a stable machine-readable code (docs/reference.md).

Raised by the API and by the cross-shard routing below it (`cluster.routing`); `api.problems`
renders it as an RFC 9457 problem. `ProblemCode` lists every code the server answers with; the
OpenAPI document publishes it as an enum.
"""

from __future__ import annotations

from typing import Any, Literal

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


def leadership_moving(code: ProblemCode, detail: str, **extra: Any) -> Problem:
    """A 503 that clears up once a leader is in place: it says when to try again."""
    return Problem(503, code, detail, headers={"Retry-After": str(RETRY_AFTER_S)}, **extra)
