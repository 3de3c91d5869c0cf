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
from gateway.config.wording import is_secret, plain
from gateway.config.yaml_errors import describe

# A Redis URL in the environment, used where the file names no redis.url (README "Several
# replicas"): without it each replica would run its own embedded Redis and share nothing.
REDIS_URL_ENV = "REDIS_URL"

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


def redis_from_env(raw: dict[str, Any], env: Mapping[str, str]) -> bool:
    """Put ``$REDIS_URL`` in ``raw``'s ``redis.url`` when the file names none in mode standalone
    (where the embedded Redis would run instead); whether it did."""
    value = env.get(REDIS_URL_ENV, "").strip()
    redis = raw.get("redis")
    if not value or not isinstance(redis, dict | None):
        return False
    redis = dict(redis or {})
    if redis.get("url") is not None or redis.get("mode", "standalone") != "standalone":
        return False
    redis["url"] = value
    raw["redis"] = redis
    return True


def _format_errors(
    exc: ValidationError, raw: Any, model: type[Settings], marks: Marks | None = None
) -> list[str]:
    """Each error as ``path: reason (line N)``, its path as the file has it (config.paths) and
    its reason in plain words (config.wording)."""
    problems = []
    for err in exc.errors():
        parts, holder = file_parts(err["loc"], model)
        msg = err["msg"].removeprefix("Value error, ")
        key = parts[-1] if parts else ""
        secret = is_secret(key, _annotation(holder, key))
        if err["type"] == "extra_forbidden":
            meant = suggestion(str(key), holder)
            msg = f"unknown key; did you mean `{meant}`?" if meant else "unknown key"
        elif err["type"] == "missing":
            msg = "missing (this key is required)"
        elif err["type"] == "union_tag_invalid":
            ctx = err.get("ctx", {})
            name = str(ctx.get("discriminator", "")).strip("'")
            parts = (*parts, name)
            tag, expected = str(ctx.get("tag")), str(ctx.get("expected_tags", ""))
            tags = [t.strip(" '") for t in expected.split(",")]
            msg = f"unknown {name} {tag!r} (expected one of: {expected})"
            meant = _alias_of(tag, model) or closest(tag, tags)
            msg += f"; did you mean `{meant}`?" if meant else ""
        elif err["type"] == "union_tag_not_found":
            name = str(err.get("ctx", {}).get("discriminator", "")).strip("'")
            parts, msg = (*parts, name), "missing (this key is required)"
        else:
            msg = plain(err, secret=secret) or msg
        pieces = msg.split("; ")
        if not all(_LEADING_KEY.match(p) for p in pieces):
            pieces = [msg]  # one message, whose reason has a "; " of its own
        if _LEADING_KEY.match(pieces[0]) and err["type"] == "value_error":
            # A validator's "key.path: reason" lines: from the top (a cross-check names its
            # section first) or from the item the validator checked (encodingAesKey: …).
            top = not parts or all(p.split(".", 1)[0] == parts[0] for p in pieces)
            base = "" if top else ".".join(str(p) for p in parts) + "."
            problems += [rename(base + p, raw, marks) for p in pieces]
            continue
        where = shown(parts, raw) or "(top level)"
        problems.append(f"{where}: {msg}{line_note(parts, marks)}")
    return problems


# A validator's message that starts with a key path: "encodingAesKey: …", "schedules.0.cron: …".
_LEADING_KEY = re.compile(r"^[A-Za-z][\w-]*(?:\.[\w-]+)*: ")


def _annotation(holder: Any, key: object) -> Any:
    """The type of ``holder``'s field ``key`` (by alias or name), None when unknown."""
    fields = getattr(holder, "model_fields", {})
    for name, field in fields.items():
        if key in (field.alias, name):
            return field.annotation
    return None


def _alias_of(tag: str, model: type[Settings]) -> str | None:
    """The platform an integration's ``platform`` value means by another name (``feishu`` is
    ``lark``): each adapter's settings model lists its own (``platform_aliases``)."""
    found = _annotation(model, "integrations")
    for member in _members(found):
        aliases = getattr(member, "platform_aliases", ())
        if tag.strip().lower() in aliases:
            platform = getattr(member, "model_fields", {}).get("platform")
            return _literal(platform.annotation) if platform is not None else None
    return None


def _members(tp: Any) -> list[Any]:
    """The models of ``list[A | B | …]`` (an ``Annotated`` union or a single model)."""
    from typing import get_args

    out: list[Any] = []
    stack = [tp]
    while stack:
        current = stack.pop()
        if isinstance(current, type) and hasattr(current, "model_fields"):
            out.append(current)
        else:
            stack.extend(get_args(current))
    return out


def _literal(tp: Any) -> str | None:
    from typing import get_args

    args = get_args(tp)
    return str(args[0]) if args else None


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
    redis_env: bool = False,
) -> Settings:
    """Read, substitute and validate a config file (or an already parsed mapping); with
    ``redis_env``, ``$REDIS_URL`` is the Redis of a file that names none (the CLI's)."""
    raw: Any
    marks: Marks | None = None
    if isinstance(source, Mapping):
        raw = dict(source)
    else:
        raw, marks = read_marked(Path(source))
    # Unset variables and validation errors are reported together, so one run shows them all.
    environ = os.environ if env is None else env
    raw, unset_vars = substitute_env(raw, environ)
    url_from_env = redis_env and redis_from_env(raw, environ)
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
    if url_from_env:
        settings.redis._url_from = REDIS_URL_ENV
    return settings
