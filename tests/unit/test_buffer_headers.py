"""Buffer-record checks in the compiled core (`delay_service.headers`): each rule, exactly."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from delay_service.headers import (
    CANCEL,
    CONTROL_HEADERS,
    DELAY_MS,
    DELIVER_AT,
    ID,
    TARGET,
    CancelRequest,
    InvalidRecord,
    Limits,
    ScheduleRequest,
    parse,
)
from foundation.record_size import record_bytes

LIMITS = Limits(max_delay_ms=1_000, max_record_bytes=100, forbidden_targets={"kpd.schedules"})
DEFAULT = "0-7-1700"
Headers = list[tuple[str, bytes | None]]
NOT_DECIMAL = "is not a non-negative decimal integer"
ID_RULE = "must be 1..128 of [A-Za-z0-9._:-]"


def parsed(headers: Headers | None, key: bytes | None = None, value: bytes | None = None):
    return parse(headers, key, value, 5_000, DEFAULT, LIMITS)


def refused(headers: Headers | None, key: bytes | None = None, value: bytes | None = None) -> str:
    with pytest.raises(InvalidRecord) as error:
        parsed(headers, key, value)
    return str(error.value)


def test_the_header_names_are_the_contracts() -> None:
    names = ("kpd-target", "kpd-deliver-at", "kpd-delay-ms", "kpd-id", "kpd-cancel")
    assert names == (TARGET, DELIVER_AT, DELAY_MS, ID, CANCEL)
    assert frozenset(names) == CONTROL_HEADERS


def test_a_delay_counts_from_the_record_timestamp_and_keeps_the_user_headers_in_order() -> None:
    user: Headers = [("b", None), ("a", b"1")]
    request = parsed([user[0], (TARGET, b"orders"), (DELAY_MS, b"007"), user[1]])
    assert request == ScheduleRequest(DEFAULT, "orders", 5_007, tuple(user))
    assert request.schedule_id is DEFAULT  # the caller's own object: its default id


def test_a_deliver_at_is_taken_as_given_and_a_named_id_is_the_schedule_id() -> None:
    request = parsed([(TARGET, b"t.1-_"), (DELIVER_AT, b"6000"), (ID, b"order:42")])
    assert request == ScheduleRequest("order:42", "t.1-_", 6_000, ())
    assert parsed([(TARGET, b"t"), (DELIVER_AT, b"0")]).due_ms == 0  # the past: due at once


def test_a_cancel_wins_over_everything_else_on_the_record() -> None:
    assert parsed([(TARGET, b"__x"), (DELAY_MS, b"x"), (CANCEL, b"a.b")]) == CancelRequest("a.b")
    assert refused([(CANCEL, b"")]) == f"kpd-cancel '' {ID_RULE}"


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ([(DELAY_MS, b"1")], "missing kpd-target header"),
        ([(TARGET, b"..")], "kpd-target '..' is not a valid topic name"),
        ([(TARGET, b"a b")], "kpd-target 'a b' is not a valid topic name"),
        ([(TARGET, b"x" * 250)], f"kpd-target '{'x' * 80}' is not a valid topic name"),
        ([(TARGET, b"kpd.schedules")], "kpd-target 'kpd.schedules' is a kpd topic"),
        ([(TARGET, b"__x")], "kpd-target '__x' is a Kafka-internal topic"),
        ([(TARGET, b"t")], "exactly one of kpd-deliver-at and kpd-delay-ms is required"),
        (
            [(TARGET, b"t"), (DELAY_MS, b"1"), (DELIVER_AT, b"1")],
            "exactly one of kpd-deliver-at and kpd-delay-ms is required",
        ),
        ([(TARGET, b"t"), (DELAY_MS, b" 1")], f"kpd-delay-ms ' 1' {NOT_DECIMAL}"),
        ([(TARGET, b"t"), (DELAY_MS, b"-1")], f"kpd-delay-ms '-1' {NOT_DECIMAL}"),
        ([(TARGET, b"t"), (DELAY_MS, None)], f"kpd-delay-ms '' {NOT_DECIMAL}"),
        (
            [(TARGET, b"t"), (DELAY_MS, b"1001")],
            "kpd-delay-ms 1001 exceeds the max delay of 1000 ms",
        ),
        (
            [(TARGET, b"t"), (DELIVER_AT, b"6001")],
            "kpd-deliver-at 6001 is beyond the max delay of 1000 ms",
        ),
        ([(TARGET, b"t"), (DELIVER_AT, b"1" * 16)], f"kpd-deliver-at '{'1' * 16}' is out of range"),
        ([(TARGET, b"t"), (DELAY_MS, b"1"), (ID, b"x\n")], f"kpd-id 'x\\n' {ID_RULE}"),
        ([(TARGET, b"t"), (DELAY_MS, b"1"), (ID, b"x" * 129)], f"kpd-id '{'x' * 129}' {ID_RULE}"),
        ([(ID, b"a"), (ID, b"a")], "header kpd-id given more than once"),
        ([(TARGET, "ü".encode())], "header kpd-target is not ASCII"),
    ],
)
def test_a_refusal_says_why(headers: Headers, reason: str) -> None:
    assert refused(headers) == reason


def test_the_size_limit_counts_key_value_and_user_headers_but_not_kpd_headers() -> None:
    kpd: Headers = [(TARGET, b"t" * 200), (DELAY_MS, b"1")]
    user: Headers = [("ü", b"12")]  # 2 bytes of name, 2 of value, 8 of framing
    fits = b"k" * (100 - 12 - 10)
    assert record_bytes(fits, b"v" * 10, user) == 100
    assert parsed([*kpd, *user], fits, b"v" * 10).headers == tuple(user)
    too_big = refused([*kpd, *user], fits + b"k", b"v" * 10)
    assert too_big == "record of 101 bytes exceeds the 100 limit"


hostile = st.lists(
    st.tuples(
        st.sampled_from(sorted(CONTROL_HEADERS)) | st.text(max_size=6),
        st.none() | st.binary(max_size=20) | st.sampled_from([b"orders", b"12", b"kpd.schedules"]),
    ),
    max_size=7,
)


@given(hostile, st.none() | st.binary(max_size=80), st.integers(-1, 2**50), st.integers(0, 10**16))
def test_whatever_the_bytes_a_record_is_a_request_or_invalid(
    headers: Headers, value: bytes | None, timestamp_ms: int, max_delay_ms: int
) -> None:
    limits = Limits(max_delay_ms=max_delay_ms, max_record_bytes=60, forbidden_targets=set())
    try:
        request = parse(headers, None, value, timestamp_ms, DEFAULT, limits)
    except InvalidRecord:
        return
    user = tuple(h for h in headers if h[0] not in CONTROL_HEADERS)
    control = dict(headers)
    if isinstance(request, CancelRequest):
        assert request.schedule_id == control[CANCEL].decode()
        return
    assert request.headers == user
    assert record_bytes(None, value, user) <= 60
    assert request.target == control[TARGET].decode()
    if DELAY_MS in control:
        assert request.due_ms == timestamp_ms + int(control[DELAY_MS])
    else:
        assert request.due_ms == int(control[DELIVER_AT])
    assert request.due_ms - timestamp_ms <= max_delay_ms


def test_headers_of_the_wrong_shape_raise_type_errors_not_invalid_records() -> None:
    with pytest.raises(TypeError):
        parse([("kpd-id",)], None, None, 0, DEFAULT, LIMITS)
    with pytest.raises(TypeError):
        parse([(TARGET, "orders")], None, None, 0, DEFAULT, LIMITS)
