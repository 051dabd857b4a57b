"""The base of every JSON request body."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator


class RequestBody(BaseModel):
    """Unknown fields are a 422, and so is `true`/`false` where a number or text is expected
    (pydantic would read `false` as 0): no body field is a boolean. Integral numbers such as
    `3050.0` stay accepted, as the OpenAPI `integer` type allows them."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("expected a number or text, got a boolean")
        return value
