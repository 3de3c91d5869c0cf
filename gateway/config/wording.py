"""pydantic's validation errors in plain words, for ``check`` and the start-up error: what the
key needs and what the file has instead (``must be at most 65535, not 99999``; ``must be one of
mention_only, all_messages, not 'mention'; did you mean `mention_only`?``). A secret's value is
never repeated."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gateway.config.paths import closest

# What a key's name says of a secret, where the model cannot tell (``SecretStr`` fields can).
_SECRET_NAME = re.compile(r"secret|token|password|apikey|aeskey|privatekey|credential", re.I)

# Patterns the settings share, in words.
_PATTERNS = {
    r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$": "letters, digits, _ . and -, starting with a letter "
    "or digit, at most 64 characters",
    r"^[A-Za-z0-9_.-]{1,32}$": "letters, digits, _ . and -, at most 32 characters",
}


def shown(value: Any) -> str:
    """A value as the YAML file would have it, or what kind of thing it is."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "nothing (null)"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return repr(value) if len(value) <= 80 else f"{value[:77]!r}…"
    if isinstance(value, Mapping):
        return "a mapping (key: value)"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


def is_secret(key: object, annotation: Any) -> bool:
    return "SecretStr" in repr(annotation) or bool(_SECRET_NAME.search(str(key)))


def plain(err: Mapping[str, Any], *, secret: bool) -> str | None:
    """``err`` (one of ``ValidationError.errors()``) in plain words, or None for a kind of error
    whose own message is already plain (a validator's ``ValueError``)."""
    kind = err["type"]
    ctx: Mapping[str, Any] = err.get("ctx") or {}
    value = err.get("input")
    was = "" if secret else f", not {shown(value)}"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        bound = next(iter(ctx.values()), None)
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)
        words = {
            "greater_than_equal": "at least",
            "greater_than": "more than",
            "less_than_equal": "at most",
            "less_than": "less than",
        }[kind]
        return f"must be {words} {bound}{was}"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return f"must be a whole number{was}"
    if kind in ("float_parsing", "float_type", "decimal_parsing", "decimal_type"):
        return f"must be a number{was}"
    if kind in ("bool_parsing", "bool_type"):
        return f"must be true or false{was}"
    if kind == "string_type":
        quote = "; put it in quotes" if isinstance(value, int | float | bool) else ""
        return f"must be text{was}{quote}"
    if kind in ("literal_error", "enum"):
        choices = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        text = f"must be one of {', '.join(choices)}{was}"
        meant = closest(str(value), choices) if isinstance(value, str) and not secret else None
        return text + (f"; did you mean `{meant}`?" if meant else "")
    if kind == "string_too_short":
        least = ctx.get("min_length", 1)
        if value == "":
            return "must not be empty"
        return f"must be at least {least} characters long" + ("" if secret else f"{was}")
    if kind == "string_too_long":
        has = f" (it has {len(value)})" if isinstance(value, str) else ""
        return f"must be at most {ctx.get('max_length')} characters long{has}"
    if kind == "too_short":
        least = ctx.get("min_length", 1)
        return f"needs at least {least} item{'s' * (least != 1)}"
    if kind == "too_long":
        most = ctx.get("max_length")
        count = ctx.get("actual_length")
        return f"may have at most {most} item{'s' * (most != 1)} (it has {count})"
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern", ""))
        form = _PATTERNS.get(pattern, f"the form {pattern}")
        return f"must be {form}{was}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"must be a mapping of keys (key: value){was}"
    if kind == "path_type":
        return f"must be a path (text){was}"
    if kind in ("list_type", "tuple_type", "set_type"):
        return f"must be a list (one `- item` a line, or [a, b]){was}"
    return None
