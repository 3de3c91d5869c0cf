"""What a valid configuration may still get wrong: placeholder secrets left from the examples, no
integration at all, the console or the admin API exposed; and how to show a Redis URL without its
password (``check`` and ``run``, which logs them at start)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from pydantic import BaseModel, SecretStr

from gateway.config.paths import item_path, rename
from gateway.config.platform_limits import PlatformLimits, platform_defaults, undeclared_limits
from gateway.config.settings import Settings
from gateway.policy.checks import bundle_warnings
from gateway.runtime.http_guard import is_loopback

# Values the example configs and docs use where the operator must put a real one: replace-me,
# change-me, sk-x-replace-me, and the example AES key of the WeCom docs; for secrets also
# "<your token>", "your-app-secret", "xxxx".
_PLACEHOLDER = re.compile(r"(?:replace|change|fill)[-_. ]?(?:me|this|it)(?![a-z])", re.I)
_SECRET_PLACEHOLDER = re.compile(r"^x{3,}$|^<[^<>]*>$|^your[-_ ]", re.I)
_EXAMPLE_VALUES = frozenset({"abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG"})


def is_placeholder(value: str, *, secret: bool = True) -> bool:
    text = value.strip()
    return (
        bool(_PLACEHOLDER.search(text))
        or text in _EXAMPLE_VALUES
        or (secret and bool(_SECRET_PLACEHOLDER.search(text)))
    )


def _strings(node: Any, path: str) -> Iterator[tuple[str, str, bool]]:
    """Every string in the settings as (key path, value, is a secret)."""
    if isinstance(node, BaseModel):
        for name, field in type(node).model_fields.items():
            key = field.alias or name
            yield from _strings(getattr(node, name), f"{path}.{key}" if path else key)
    elif isinstance(node, list | tuple):
        for i, item in enumerate(node):
            yield from _strings(item, f"{path}.{i}")
    elif isinstance(node, dict):
        for key, item in node.items():
            yield from _strings(item, f"{path}.{key}")
    elif isinstance(node, SecretStr):
        yield path, node.get_secret_value(), True
    elif isinstance(node, str):
        yield path, node, False


def config_warnings(settings: Settings) -> list[str]:
    """Problems that do not stop the gateway but will surprise whoever runs it."""
    warnings: list[str] = []
    if not any(i.enabled for i in settings.integrations):
        what, fix = (
            ("all disabled", "enable one")
            if settings.integrations
            else ("none configured", "add one, e.g. {id: console, platform: console, xpertId: …}")
        )
        warnings.append(
            f"integrations: {what}, so no chat platform (not even the console) can reach the "
            f"gateway; {fix}"
        )
    warnings += budget_warnings(settings)  # route options the expert cannot take, and so on
    warnings += platform_limit_warnings(settings)
    warnings += exposure_warnings(settings)
    warnings += identity_warnings(settings)
    for path, value, secret in _strings(settings, ""):
        if is_placeholder(value, secret=secret):
            shown = "" if secret else f" ({value!r})"
            kind = "a placeholder secret" if secret else "a placeholder"
            warnings.append(f"{path}: {kind}{shown}; set the real value (or its variable)")
    # Paths as the file has them: integrations[console].routes[0].model, not integrations.0.…
    data = settings.model_dump(by_alias=True, include={"experts", "integrations", "schedules"})
    return [rename(w, data) for w in warnings]


def budget_warnings(settings: Settings) -> list[str]:
    """What ``check`` (and ``run``, in its log) says about routes and limits that will not do
    what they seem to."""
    warnings: list[str] = []
    experts = {e.id: e for e in settings.experts}
    for i, integ in enumerate(settings.integrations):
        path = f"integrations.{i}"
        declared = {v.name for v in integ.variables}
        warnings += bundle_warnings(
            path, integ.xpert_id, integ.routes, experts, settings.expert_kinds, declared
        )
        limited = any(
            v is not None
            for limits in (integ.limits, *(r.limits for r in integ.routes if r.limits))
            for v in limits.as_json().values()
        )
        if limited and integ.session_scope != "chat":
            warnings.append(
                f"{path}.limits: with sessionScope {integ.session_scope} every "
                f"{'sender' if integ.session_scope == 'chat_sender' else 'thread'} of a chat has "
                "counters of its own, so the per-chat limits apply to each of them"
            )
    return warnings


def identity_warnings(settings: Settings) -> list[str]:
    """``principals`` behind an integration whose signed events do not prove their sender: a
    forged body would act as the XpertAI user of the sender it names (issue 36)."""
    warnings: list[str] = []
    for i, integ in enumerate(settings.integrations):
        why = integ.weak_sender_proof()
        if not why or not integ.enabled:
            continue
        used = {integ.xpert_id, *(r.xpert_id or integ.xpert_id for r in integ.routes)}
        for expert in settings.experts:
            if expert.id in used and getattr(expert, "principals", None):
                warnings.append(
                    f"integrations.{i}: its turns act as their senders' XpertAI users (expert "
                    f"{expert.id}'s principals), but {why}"
                )
    return warnings


def platform_limit_warnings(settings: Settings) -> list[str]:
    """``platformLimits`` figures above what the platform publishes: the platform refuses the
    calls past its own, whatever the budget allows; and an adapter that declares no published
    limits, whose integrations run unpaced unless their ``platformLimits`` turn pacing on."""
    warnings: list[str] = []
    for i, integ in enumerate(settings.integrations):
        own, published = integ.platform_limits, platform_defaults(integ)
        if integ.enabled and undeclared_limits(integ) and not own.over(published).enabled:
            warnings.append(
                f"integrations.{i}: the {integ.platform} adapter declares no published limits, "
                "so its calls are not paced; set platformLimits (enabled: true and the "
                "platform's figures, docs/platform-limits.md)"
            )
        if not published.enabled or not own.enabled:
            continue
        for key in own.model_fields_set & set(PlatformLimits.model_fields):
            mine, theirs = getattr(own, key), getattr(published, key)
            if isinstance(mine, int) and isinstance(theirs, int) and mine > theirs:
                name = PlatformLimits.model_fields[key].alias or key
                warnings.append(
                    f"integrations.{i}.platformLimits.{name}: {mine} is above {integ.platform}'s "
                    f"published {theirs}; the platform refuses the calls past its own limit"
                )
    return warnings


def exposure_warnings(settings: Settings) -> list[str]:
    """The console on an address other machines reach (it has no login), and the admin API's
    and the MCP endpoint's bearer tokens sent over a network without TLS."""
    server = settings.server
    host = server.host.strip("[]")
    if is_loopback(host.lower()):
        return []
    shown = host or "all addresses"
    warnings: list[str] = []
    consoles = [
        item_path("integrations", settings.integrations, i)
        for i, integ in enumerate(settings.integrations)
        if integ.enabled and integ.platform == "console"
    ]
    if consoles:
        warnings.append(
            f"server.host: the console ({', '.join(consoles)}) listens on {shown}, not a "
            "loopback address, and has no login: whoever reaches the port can chat as any "
            "user; keep server.host 127.0.0.1 or put access control in front"
        )
    if settings.admin.token is not None and not (server.public_url or "").startswith("https://"):
        warnings.append(
            f"admin.token: the admin API listens on {shown} with no TLS in front "
            "(server.publicUrl is not https), so its bearer token crosses the network in "
            "clear; serve it through an https proxy (and set publicUrl to it) or listen on "
            "127.0.0.1"
        )
    if settings.mcp.enabled and not (server.public_url or "").startswith("https://"):
        warnings.append(
            f"mcp: the MCP endpoint ({settings.mcp.path}) listens on {shown} with no TLS in "
            "front (server.publicUrl is not https), so its clients' bearer tokens and what "
            "they send cross the network in clear; serve it through an https proxy (and set "
            "publicUrl to it) or listen on 127.0.0.1"
        )
    return warnings


def redis_summary(settings: Settings) -> str:
    """Where the gateway keeps its state, for ``check``: mode, location (no password), shards."""
    redis = settings.redis
    url = redis.url.get_secret_value() if redis.url else None
    if redis.embedded:
        where = f"embedded (under {settings.data_dir})"
    elif redis.mode == "sentinel":
        where = f"sentinel master {redis.master_name!r} via {', '.join(redis.sentinels)}"
        parts = urlsplit(url or "")
        notes = [
            note
            for note, used in (
                (f"database {parts.path.strip('/')}", parts.path.strip("/") not in ("", "0")),
                ("TLS", parts.scheme == "rediss"),
                ("password hidden", bool(parts.password)),
            )
            if used
        ]
        where += f" ({', '.join(notes)})" if notes else ""
    elif redis.mode == "cluster":
        where = f"cluster via {redis_location(url or '')}"
    else:
        where = redis_location(url or "")
    if redis.url_from is not None:
        where += f" (from ${redis.url_from}; the config names no redis.url)"
    shards = settings.runtime.due_shards
    return f"{where}, key prefix {redis.key_prefix!r}, {shards} due shard{'s' * (shards != 1)}"


def redis_location(url: str) -> str:
    """A Redis URL as scheme, host, port and database (or socket path), without user name,
    password or query (redis-py also reads ``?password=``)."""
    parts = urlsplit(url)
    hidden = bool(parts.username or parts.password) or any(
        k.lower() == "password" for k, _ in parse_qsl(parts.query)
    )
    if parts.scheme == "unix":
        where = f"unix://{parts.path}"
    else:
        host = parts.hostname or "localhost"
        if ":" in host:
            host = f"[{host}]"
        port = f":{parts.port}" if parts.port else ""
        where = f"{parts.scheme}://{host}{port}{parts.path}"
    return f"{where} (password hidden)" if hidden else where
