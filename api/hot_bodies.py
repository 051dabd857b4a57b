"""msgspec decoders of the pop-group bodies, made from their pydantic models (`api.pop_bodies`).

The lean path (`api.hot_routes`) decodes a body with msgspec, some 20 times cheaper than FastAPI's
pydantic validation; a body msgspec refuses goes on to FastAPI, which answers it (422 with the
field and its bounds) exactly as before. So msgspec must never accept what pydantic refuses:
each struct has its model's fields, defaults and bounds, refuses unknown fields, and takes no
`true`/`false` for a number or a text (msgspec is strict; `RequestBody` refuses booleans too). A
model with a constraint or a validator this module does not know is refused when the struct is
made, at import, not mirrored loosely.
"""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any

import msgspec
from annotated_types import Ge, Le, MaxLen, MinLen
from pydantic import BaseModel

_BOUNDS = {Ge: "ge", Le: "le", MinLen: "min_length", MaxLen: "max_length"}
_KNOWN_VALIDATORS = {"_no_booleans"}  # `RequestBody`'s, which msgspec's strictness matches


def struct_of(model: type[BaseModel]) -> type[msgspec.Struct]:
    """A frozen struct with `model`'s fields, defaults and bounds."""
    decorators = model.__pydantic_decorators__
    unknown = set(decorators.field_validators) - _KNOWN_VALIDATORS
    if unknown or decorators.model_validators or decorators.root_validators:
        raise TypeError(f"{model.__name__} has validators msgspec cannot mirror: {unknown}")
    fields: list[tuple[Any, ...]] = []
    for name, info in model.model_fields.items():
        kind = _type_of(info.annotation, info.metadata)
        fields.append((name, kind) if info.is_required() else (name, kind, info.default))
    return msgspec.defstruct(model.__name__, fields, forbid_unknown_fields=True, frozen=True)


def decoder_of(model: type[BaseModel]) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(struct_of(model))


def _type_of(annotation: Any, metadata: list[Any]) -> Any:
    """`annotation` as msgspec reads it, with the bounds of `metadata` on its non-None part."""
    if typing.get_origin(annotation) in (types.UnionType, typing.Union):
        parts = [part for part in typing.get_args(annotation) if part is not type(None)]
        if len(parts) != 1:
            raise TypeError(f"only `T | None` unions are mirrored, not {annotation}")
        return _type_of(parts[0], metadata) | None
    if typing.get_origin(annotation) is list:
        (item,) = typing.get_args(annotation)
        base: Any = list[_type_of(item, [])]
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        base = struct_of(annotation)
    elif annotation in (int, str):
        base = annotation
    else:
        raise TypeError(f"no msgspec mirror for {annotation}")
    bounds = {}
    for constraint in metadata:
        name = _BOUNDS.get(type(constraint))
        if name is None:
            raise TypeError(f"no msgspec mirror for the constraint {constraint!r}")
        bounds[name] = getattr(constraint, name)
    return Annotated[base, msgspec.Meta(**bounds)] if bounds else base
