"""The base of every settings model: camelCase keys, unknown keys refused, frozen (DESIGN.md §4).
Its own module so that parts of the settings can live in modules of their own."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class GatewayModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )
