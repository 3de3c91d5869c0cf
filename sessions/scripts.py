"""The text of a Lua script of ``sessions/lua`` (shipped as package data)."""

from __future__ import annotations

from importlib import resources


def lua(name: str) -> str:
    return resources.files("sessions").joinpath("lua", name).read_text(encoding="utf-8")
