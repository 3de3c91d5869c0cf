"""The base of every settings model: camelCase keys, unknown keys refused, frozen (DESIGN.md §4),
with the id pattern and the URL check several models share. It imports nothing of ours, so that
every part of the settings can live in a module of its own."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

# An integration's, an expert's or a schedule's id: what paths, keys and URLs name it by.
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class GatewayModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


def http_url(value: str) -> str:
    """A validator for base URLs: http(s) only, without the trailing slash."""
    if not value.startswith(("http://", "https://")):
        raise ValueError("must be an http:// or https:// URL")
    return value.rstrip("/")
