"""The lean path's msgspec decoders (`api.hot_bodies`) never accept a body FastAPI's pydantic
models refuse, read what they accept as pydantic does, and accept the bodies clients send."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from api.hot_bodies import decoder_of, struct_of
from api.pop_bodies import MAX_INVISIBLE_MS, AckBody, LeaseBody, NackBody, PopBody, RejectBody

MODELS = [PopBody, AckBody, NackBody, LeaseBody, RejectBody]

# Values near every bound of the models, and the wrong types a client may send.
edges = st.sampled_from(
    [0, 1, -1, 999, 1000, 1001, 20_000, 20_001, MAX_INVISIBLE_MS, MAX_INVISIBLE_MS + 1, 3050.0]
)
scalars = st.one_of(
    edges, st.integers(), st.booleans(), st.none(), st.text(max_size=3), st.floats(), st.just("")
)
texts = st.one_of(st.text(max_size=5), st.text(min_size=999, max_size=1001, alphabet="ab"))
items = st.fixed_dictionaries(
    {"receipt": st.one_of(texts, scalars)},
    optional={
        "delay_ms": scalars,
        "invisible_ms": scalars,
        "reason": st.one_of(texts, scalars),
        "other": scalars,
    },
)
lists = st.one_of(
    st.lists(items, max_size=3),
    st.lists(st.one_of(texts, scalars), max_size=3),
    st.lists(items, min_size=1000, max_size=1001),
    scalars,
)
bodies = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "max_messages": scalars,
            "invisible_ms": scalars,
            "wait_ms": scalars,
            "receipts": lists,
            "items": lists,
            "extra": scalars,
        },
    ),
    scalars,
    st.lists(scalars, max_size=2),
)


def plain(value: Any) -> Any:
    """A decoded body as plain data, to compare msgspec's with pydantic's."""
    if isinstance(value, BaseModel):
        return {k: plain(v) for k, v in value}
    if isinstance(value, msgspec.Struct):
        return {k: plain(getattr(value, k)) for k in value.__struct_fields__}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
@settings(max_examples=400, deadline=None)
@given(body=bodies)
def test_msgspec_accepts_only_what_pydantic_accepts_and_reads_it_alike(
    model: type[BaseModel], body: Any
) -> None:
    data = json.dumps(body).encode()
    try:
        decoded = decoder_of(model).decode(data)
    except msgspec.DecodeError:
        return  # FastAPI answers it
    try:
        validated = model.model_validate_json(data)
    except ValidationError as error:
        pytest.fail(f"msgspec accepted what pydantic refuses: {data!r}: {error}")
    assert plain(decoded) == plain(validated)


@pytest.mark.parametrize(
    ("model", "body"),
    [
        (PopBody, {}),
        (PopBody, {"max_messages": 100, "invisible_ms": 30_000, "wait_ms": 20_000}),
        (PopBody, {"max_messages": 1, "invisible_ms": None}),
        (AckBody, {"receipts": ["r1", "r2"]}),
        (NackBody, {"items": [{"receipt": "r"}, {"receipt": "s", "delay_ms": 5000}]}),
        (LeaseBody, {"items": [{"receipt": "r", "invisible_ms": 0}]}),
        (RejectBody, {"items": [{"receipt": "r", "reason": "bad input"}, {"receipt": "s"}]}),
    ],
)
def test_the_bodies_clients_send_take_the_lean_path(model: type[BaseModel], body: Any) -> None:
    decoded = decoder_of(model).decode(json.dumps(body).encode())
    assert plain(decoded) == plain(model.model_validate(body))


def test_a_model_with_a_constraint_msgspec_cannot_mirror_is_refused() -> None:
    from pydantic import Field

    class Odd(BaseModel):
        n: int = Field(multiple_of=2)

    with pytest.raises(TypeError, match="constraint"):
        struct_of(Odd)
