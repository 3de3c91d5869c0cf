"""Reading a config file: YAML parsed with errors that name the file and line, ``${VAR}`` and
``${VAR:-default}`` substituted from the environment, the model validated, and every problem
reported as one ``key.path: reason`` line (DESIGN.md §4)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from gateway.config.errors import ConfigError, ConfigFileError
from gateway.config.settings import Settings

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def substitute_env(node: Any, env: Mapping[str, str], path: str = "") -> tuple[Any, list[str]]:
    """Replace ``${VAR}`` / ``${VAR:-default}`` in every string; report unset variables by path."""
    problems: list[str] = []
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            out[key], p = substitute_env(value, env, f"{path}.{key}" if path else str(key))
            problems += p
        return out, problems
    if isinstance(node, list):
        items: list[Any] = []
        for i, value in enumerate(node):
            v, p = substitute_env(value, env, f"{path}.{i}")
            items.append(v)
            problems += p
        return items, problems
    if isinstance(node, str):

        def repl(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in env:
                return env[name]
            if default is not None:
                return default
            problems.append(f"{path}: environment variable {name} is not set")
            return ""

        return _ENV.sub(repl, node), problems
    return node, problems


def _format_errors(exc: ValidationError, raw: Any = None) -> list[str]:
    problems = []
    for err in exc.errors():
        parts = [p for p in err["loc"] if not str(p).startswith("function-")]
        # A discriminated union puts the tag into the path (integrations.0.lark.appId); the user
        # wrote integrations.0.appId with platform: lark, so the tag is dropped.
        if len(parts) > 2 and parts[0] == "integrations" and isinstance(parts[1], int):
            items = raw.get("integrations") if isinstance(raw, dict) else None
            item = items[parts[1]] if isinstance(items, list) and parts[1] < len(items) else None
            if isinstance(item, dict) and item.get("platform") == parts[2]:
                del parts[2]
        loc = ".".join(str(p) for p in parts)
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        elif err["type"] == "union_tag_invalid":
            ctx = err.get("ctx", {})
            name = str(ctx.get("discriminator", "")).strip("'")
            loc = f"{loc}.{name}"
            msg = f"unknown {name} {ctx.get('tag')!r} (expected one of: {ctx.get('expected_tags')})"
        if not loc and re.match(r"^[A-Za-z][\w.]*: ", msg):
            problems += msg.split("; ")  # the cross-checks: already "path: reason" each
            continue
        problems.append(f"{loc or '(top level)'}: {msg}")
    return problems


def read_yaml(path: Path) -> Any:
    """The parsed file; a missing, unreadable, empty or malformed file is a
    :class:`ConfigFileError` naming the file (and the line of a YAML error)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        where = "" if path.is_absolute() else f" (in {Path.cwd()})"
        raise ConfigFileError([f"{path}: no such config file{where}"]) from exc
    except IsADirectoryError as exc:
        raise ConfigFileError([f"{path}: is a directory, not a config file"]) from exc
    except UnicodeDecodeError as exc:
        raise ConfigFileError([f"{path}: not UTF-8 text (byte {exc.start})"]) from exc
    except OSError as exc:
        raise ConfigFileError([f"{path}: cannot read: {exc.strerror}"]) from exc
    try:
        raw = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        # Where a construct left open began (a quote, a bracket, a key without its colon) is
        # the line to fix; inside a block mapping or list it is where the parser stopped.
        context = exc.context or ""
        block = context.startswith("while parsing a block")
        first, other = exc.context_mark, exc.problem_mark
        if block or first is None:
            first, other = other, first
        where = f"{path}, line {first.line + 1}, column {first.column + 1}" if first else str(path)
        what = exc.problem or "syntax error"
        if first and other and other.line != first.line:
            what += (
                f" (in the {context.removeprefix('while parsing a ')} from line {other.line + 1})"
                if block
                else f" (found at line {other.line + 1})"
            )
        raise ConfigFileError([f"{where}: not valid YAML: {what}"]) from exc
    except yaml.YAMLError as exc:
        raise ConfigFileError([f"{path}: not valid YAML: {exc}"]) from exc
    if raw is None:
        raise ConfigFileError([f"{path}: the file is empty (no settings in it)"])
    if not isinstance(raw, dict):
        found = type(raw).__name__
        raise ConfigFileError([f"{path}: expected a mapping of settings (key: value), not {found}"])
    return raw


def load_settings(
    source: Path | str | Mapping[str, Any],
    *,
    model: type[Settings] = Settings,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Read, substitute and validate a config file (or an already parsed mapping)."""
    raw: Any = dict(source) if isinstance(source, Mapping) else read_yaml(Path(source))
    # Unset variables and validation errors are reported together, so one run shows them all.
    raw, problems = substitute_env(raw, os.environ if env is None else env)
    try:
        settings = model.model_validate(raw)
    except ValidationError as exc:
        # A key whose variable is unset has that problem, not also one about its empty value.
        unset = {p.partition(":")[0] for p in problems}
        errors = [e for e in _format_errors(exc, raw) if e.partition(":")[0] not in unset]
        raise ConfigError(problems + errors) from exc
    if problems:
        raise ConfigError(problems)
    return settings
