"""Pure HTTP rules: the token comparison, the client's retry policy, the documented codes."""

from __future__ import annotations

import ast
import time
import typing
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path

import pytest

from api.auth import bearer_token_matches
from foundation.problem import ProblemCode
from kpd_client.retry import KpdError, retry_after_s, retry_while_moving

TOKEN = b"t0ken-for-tests"


@pytest.mark.parametrize(
    "values",
    [
        [b"Bearer t0ken-for-tests"],
        [b"bearer t0ken-for-tests"],  # the scheme is case-insensitive (RFC 9110)
        [b"BEARER    t0ken-for-tests"],  # 1*SP between scheme and token (RFC 6750)
    ],
)
def test_token_accepted(values):
    assert bearer_token_matches([(b"authorization", v) for v in values], TOKEN)


@pytest.mark.parametrize(
    "values",
    [
        [],
        [b""],
        [b"Bearer"],
        [b"Bearer "],
        [b"t0ken-for-tests"],
        [b"Basic t0ken-for-tests"],
        [b"Bearer t0ken-for-test"],
        [b"Bearer t0ken-for-testsX"],
        [b"Bearer t0ken-for-tests\xc2\xa0"],  # U+00A0, which str.strip() removes
        [b"Bearer t0ken-for-tests\xc2\x85"],  # U+0085
        [b"Bearer t0ken-for-tests\t"],
        [b"Bearer\tt0ken-for-tests"],
        [b"Bearer\xc2\xa0t0ken-for-tests"],
        [b"Bearer t0ken-for-tests", b"Bearer t0ken-for-tests"],  # two headers: ambiguous
        [b"Bearer wrong", b"Bearer t0ken-for-tests"],
    ],
)
def test_token_refused(values):
    assert not bearer_token_matches([(b"authorization", v) for v in values], TOKEN)


def test_other_headers_do_not_count_as_the_token():
    assert not bearer_token_matches([(b"x-authorization", b"Bearer t0ken-for-tests")], TOKEN)


def test_retry_after_parsing():
    now = 1_700_000_000.0
    assert retry_after_s("1", now) == 1.0
    assert retry_after_s(" 120 ", now) == 120.0
    in_3_s = format_datetime(datetime.fromtimestamp(now + 3, UTC), usegmt=True)
    assert retry_after_s(in_3_s, now) == 3.0
    past = format_datetime(datetime.fromtimestamp(now - 60, UTC), usegmt=True)
    assert retry_after_s(past, now) == 0.0
    for bad in (None, "", "-1", "1.5", "soon", "\u0661", "Wed, 99 Foo 2015 07:28:00 GMT"):
        assert retry_after_s(bad, now) is None, bad


def _error(status: int, code: str, retry_after: float | None = None) -> KpdError:
    return KpdError(status, {"code": code, "detail": "d"}, retry_after)


def test_retry_hook_waits_what_the_server_says_while_leadership_moves():
    hook = retry_while_moving(time.monotonic() + 10)
    for code in ("leader_starting", "no_leader", "not_leader", "leader_unreachable"):
        assert hook(_error(503, code, 2.0)) == 2.0
    assert hook(_error(503, "cancel_pending", 1.0)) == 1.0
    assert hook(_error(503, "no_leader")) == 0.5  # no Retry-After: a short default


def test_retry_hook_never_retries_other_answers():
    hook = retry_while_moving(time.monotonic() + 10)
    assert hook(_error(503, "leader_busy", 1.0)) is False  # the call may have taken effect
    assert hook(_error(503, "not_ready", 1.0)) is False
    assert hook(_error(422, "invalid_request", 1.0)) is False
    assert hook(_error(500, "no_leader", 1.0)) is False
    assert hook(ValueError("not an answer")) is False


def test_retry_hook_gives_up_when_the_wait_would_pass_the_deadline():
    hook = retry_while_moving(time.monotonic() + 1.5)
    assert hook(_error(503, "no_leader", 1.0)) == 1.0
    assert hook(_error(503, "no_leader", 2.0)) is False
    assert retry_while_moving(time.monotonic())(_error(503, "no_leader", 0.5)) is False
    assert retry_while_moving(time.monotonic() - 1)(_error(503, "no_leader", 0.0)) is False


# Where a problem code is given: the argument that holds it, by callee name.
CODE_ARGUMENT = {"Problem": 1, "problem_response": 1, "_refuse": 1, "leadership_moving": 0}


def _codes_raised() -> set[str]:
    codes = set()
    root = Path(__file__).resolve().parents[2]
    for path in [*(root / "api").glob("*.py"), *(root / "cluster" / "routing").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                index = CODE_ARGUMENT.get(name or "")
                if index is not None and len(node.args) > index:
                    argument = node.args[index]
                    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                        codes.add(argument.value)
            if isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple):
                first = node.value.elts[0] if node.value.elts else None
                if isinstance(first, ast.Constant) and str(first.value).endswith("_topic"):
                    codes.add(first.value)
    return codes


def test_every_problem_code_raised_in_the_api_is_in_the_documented_enum():
    raised = _codes_raised()
    documented = set(typing.get_args(ProblemCode))
    assert {"unauthorized", "request_timeout", "kpd_topic", "cancel_pending"} <= raised
    assert raised <= documented, raised - documented
