"""Reading a config file: YAML parsed with errors that name the file and line, ``${VAR}`` and
``${VAR:-default}`` substituted from the environment, the model validated, and every problem
reported as one ``key.path: reason`` line (docs/architecture.md, "Configuration")."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from gateway.config.errors import ConfigError, ConfigFileError
from gateway.config.paths import (
    Marks,
    closest,
    file_parts,
    line_note,
    rename,
    shown,
    suggestion,
    yaml_marks,
)
from gateway.config.settings import Settings
from gateway.config.yaml_errors import describe

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


def _format_errors(
    exc: ValidationError, raw: Any, model: type[Settings], marks: Marks | None = None
) -> list[str]:
    """Each error as ``path: reason (line N)``, its path as the file has it (config.paths)."""
    problems = []
    for err in exc.errors():
        parts, holder = file_parts(err["loc"], model)
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            key = str(parts[-1]) if parts else ""
            meant = suggestion(key, holder)
            msg = f"unknown key; did you mean `{meant}`?" if meant else "unknown key"
        elif err["type"] == "missing":
            msg = "missing (this key is required)"
        elif err["type"] == "union_tag_invalid":
            ctx = err.get("ctx", {})
            name = str(ctx.get("discriminator", "")).strip("'")
            parts = (*parts, name)
            tag, expected = str(ctx.get("tag")), str(ctx.get("expected_tags", ""))
            msg = f"unknown {name} {tag!r} (expected one of: {expected})"
            meant = closest(tag, [t.strip(" '") for t in expected.split(",")])
            msg += f"; did you mean `{meant}`?" if meant else ""
        if not parts and re.match(r"^[A-Za-z][\w.-]*: ", msg):
            # The cross-checks: already "dotted.path: reason" each.
            problems += [rename(p, raw, marks) for p in msg.split("; ")]
            continue
        where = shown(parts, raw) or "(top level)"
        problems.append(f"{where}: {msg}{line_note(parts, marks)}")
    return problems


def read_yaml(path: Path) -> Any:
    """The parsed file; a missing, unreadable, empty or malformed file is a
    :class:`ConfigFileError` naming the file (and the line of a YAML error)."""
    return read_marked(path)[0]


def read_marked(path: Path) -> tuple[Any, Marks]:
    """The parsed file and the line of each of its keys (see :func:`read_yaml`)."""
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
        raise ConfigFileError([describe(exc, path)]) from exc
    except yaml.YAMLError as exc:
        raise ConfigFileError([f"{path}: not valid YAML: {exc}"]) from exc
    if raw is None:
        raise ConfigFileError([f"{path}: the file is empty (no settings in it)"])
    if not isinstance(raw, dict):
        found = type(raw).__name__
        raise ConfigFileError([f"{path}: expected a mapping of settings (key: value), not {found}"])
    return raw, yaml_marks(text)


def load_settings(
    source: Path | str | Mapping[str, Any],
    *,
    model: type[Settings] = Settings,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Read, substitute and validate a config file (or an already parsed mapping)."""
    raw: Any
    marks: Marks | None = None
    if isinstance(source, Mapping):
        raw = dict(source)
    else:
        raw, marks = read_marked(Path(source))
    # Unset variables and validation errors are reported together, so one run shows them all.
    raw, unset_vars = substitute_env(raw, os.environ if env is None else env)
    problems = [rename(p, raw, marks) for p in unset_vars]
    try:
        settings = model.model_validate(raw)
    except ValidationError as exc:
        # A key whose variable is unset has that problem, not also one about its empty value.
        unset = {p.partition(":")[0] for p in problems}
        found = _format_errors(exc, raw, model, marks)
        errors = [e for e in found if e.partition(":")[0] not in unset]
        raise ConfigError(problems + errors) from exc
    if problems:
        raise ConfigError(problems)
    return settings
