"""Configuration: YAML validated by pydantic, camelCase keys, ``${ENV}`` substitution (§4).

Integration models come from the installed adapters (entry points), so the core never names a
platform's fields; :func:`build_settings_model` assembles the union of whatever is installed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    TypeAdapter,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class ConfigError(ValueError):
    """A configuration problem, one ``path: reason`` line per problem."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class GatewayModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class ServerSettings(GatewayModel):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    public_url: str | None = Field(None, description="Base URL the platforms reach us at")
    max_body_bytes: int = Field(1_048_576, ge=1024, description="Request bodies above are 413")


class RedisSettings(GatewayModel):
    url: SecretStr | None = Field(
        None, description="redis:// or unix:// URL; leave out to run the embedded Redis"
    )
    key_prefix: str = Field("xgw", pattern=r"^[A-Za-z0-9_.-]{1,32}$")
    connect_timeout_seconds: float = Field(
        30, gt=0, description="How long start-up retries an unreachable Redis before failing"
    )


class AdminSettings(GatewayModel):
    token: SecretStr | None = None


class LoggingSettings(GatewayModel):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "console", "json"] = Field(
        "auto", description="auto: console format in a terminal, JSON otherwise"
    )


class RuntimeSettings(GatewayModel):
    lease_seconds: float = Field(
        15, ge=1, description="Run lease; a crashed replica's turn is resumed after it expires"
    )
    dedup_ttl_hours: float = Field(24, ge=8, description="How long an event id is remembered")
    shutdown_grace_seconds: float = Field(
        20, ge=0, description="On SIGTERM, runs get this long to finish before being handed back"
    )
    max_turn_attempts: int = Field(3, ge=1, description="A turn that crashed this often fails")
    max_concurrent_runs: int = Field(200, ge=1, description="Runs one replica executes at once")
    poll_interval_ms: int = Field(
        200, ge=10, le=5000, description="How often the flusher looks for work of other replicas"
    )
    spool_max_bytes: int = Field(
        64 * 1024 * 1024,
        ge=0,
        description="Bound of the local spool (dataDir/spool) that keeps long-connection events "
        "while Redis is unreachable; 0 turns it off",
    )


class EchoExpertSettings(GatewayModel):
    """The built-in deterministic expert: steps, a streamed reply quoting the input, interrupts."""

    id: str = Field(pattern=ID_PATTERN)
    kind: Literal["echo"]
    step_titles: list[str] = Field(
        default_factory=lambda: ["Reading your message", "Thinking it over", "Writing the answer"]
    )
    step_delay_ms: int = Field(400, ge=0, le=60_000)
    char_delay_ms: int = Field(15, ge=0, le=10_000)
    chunk_chars: int = Field(4, ge=1, le=10_000)
    reply_prefix: str = "You said:"


class XpertExpertSettings(GatewayModel):
    """An XpertAI agent through its Agent-Protocol API (threads, runs/stream SSE)."""

    id: str = Field(pattern=ID_PATTERN)
    kind: Literal["xpert"]
    base_url: str = Field(description="The API root, e.g. https://api.xpertai.cn/api/ai")
    api_key: SecretStr
    assistant_id: str | None = Field(None, description="The xpertId; defaults to the expert id")
    organization_id: str | None = None
    principal_user_id: str | None = Field(
        None, description="Sent as x-principal-user-id: act as this end user"
    )
    connect_retries: int = Field(3, ge=0, le=10, description="Retries before the first byte")
    idle_timeout_seconds: float = Field(
        120, gt=0, description="A stream silent this long ends the turn with an error"
    )
    show_reasoning: bool = False
    memory_variable: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$",
        description="A state variable the xpert declares: the chat's group memory goes there "
        "(numbered lines) whenever it changed; unset, group memory is not sent",
    )
    variables: list[VariableDecl] = Field(default_factory=list)

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        return _http_url(value)


class OpenAIExpertSettings(GatewayModel):
    """Any OpenAI-compatible /chat/completions endpoint; the gateway keeps the history."""

    id: str = Field(pattern=ID_PATTERN)
    kind: Literal["openai"]
    base_url: str = Field(description="e.g. https://api.openai.com/v1 or http://127.0.0.1:11434/v1")
    api_key: SecretStr | None = None
    model: str
    system_prompt: str = Field(
        "You are a helpful assistant. Reply in {{sys.language}}. Today is {{sys.date}}.",
        description="Template; {{sys.*}}, {{memory.*}} and {{var.*}} are filled in",
    )
    temperature: float | None = Field(None, ge=0, le=2)
    max_history_messages: int = Field(20, ge=0, le=1000)
    max_history_chars: int = Field(24_000, ge=0)
    vision: bool = Field(False, description="Pass image attachments to the model")
    timeout_seconds: float = Field(120, gt=0)
    retries: int = Field(2, ge=0, le=10, description="Retries of 429 / 5xx / connect errors")
    variables: list[VariableDecl] = Field(default_factory=list)

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        return _http_url(value)


def _http_url(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise ValueError("must be an http:// or https:// URL")
    return value.rstrip("/")


AnyExpert = EchoExpertSettings | XpertExpertSettings | OpenAIExpertSettings
ExpertSettings = Annotated[AnyExpert, Field(discriminator="kind")]
EXPERTS: TypeAdapter[AnyExpert] = TypeAdapter(ExpertSettings)


def expert_from_snapshot(snapshot: dict[str, Any], current: AnyExpert | None) -> AnyExpert:
    """Rebuild a session's expert from its snapshot. Snapshots hold no secrets (they are masked
    there); the secrets of the expert with the same id in the current config are put back."""
    data = dict(snapshot)
    if current is not None and current.id == data.get("id"):
        for name, field in type(current).model_fields.items():
            value = getattr(current, name)
            if isinstance(value, SecretStr):
                data[field.alias or name] = value.get_secret_value()
    return EXPERTS.validate_python(data)


class VariableDecl(GatewayModel):
    """A conversation variable: kept with the session, written back by the expert."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
    type: Literal["string", "number", "boolean", "array", "object"] = "string"
    default: Any = None
    reducer: Literal["replace", "append", "merge"] = "replace"

    @model_validator(mode="after")
    def _reducer_fits(self) -> VariableDecl:
        if self.reducer == "append" and self.type != "array":
            raise ValueError("reducer append needs type array")
        if self.reducer == "merge" and self.type != "object":
            raise ValueError("reducer merge needs type object")
        return self


class Route(GatewayModel):
    """A per-chat rule; the first matching route wins, else the integration's ``xpertId``."""

    xpert_id: str
    chat_id: str | None = None
    chat_type: Literal["p2p", "group"] | None = None
    sender_id: str | None = None

    @model_validator(mode="after")
    def _has_matcher(self) -> Route:
        if self.chat_id is None and self.chat_type is None and self.sender_id is None:
            raise ValueError("a route needs at least one of chatId, chatType, senderId")
        return self


class IntegrationBase(GatewayModel):
    """Options every integration has; adapters subclass it with their platform fields."""

    id: str = Field(pattern=ID_PATTERN, description="integrationId")
    platform: str
    xpert_id: str = Field(description="The expert this integration talks to")
    enabled: bool = True
    summary_window_seconds: float = Field(
        0, ge=0, le=600, description="Merge messages arriving within this many quiet seconds"
    )
    max_window_seconds: float = Field(
        10,
        ge=0,
        le=3600,
        description="A burst is dispatched at the latest this long after it began",
    )
    session_timeout_seconds: int = Field(3600, ge=1, description="Idle time that ends a session")
    session_scope: Literal["chat", "chat_sender", "thread"] = "chat"
    group_reply_strategy: Literal["mention_only", "all_messages"] = "mention_only"
    busy_policy: Literal["collect", "steer", "reject"] = Field(
        "collect",
        description="A message arriving during a run: next turn, into the running agent (xpert "
        "experts), or a 'busy' answer",
    )
    update_interval_ms: int = Field(1000, ge=100, le=60_000, description="Card update throttle")
    language: str | None = None
    timezone: str | None = None
    store_raw: bool = Field(False, description="Keep the platform payload with stored envelopes")
    variables: list[VariableDecl] = Field(
        default_factory=list, description="Conversation variables (also declarable per expert)"
    )
    project_id: str | None = Field(
        None, description="XpertAI project: sys.workspace_path becomes /project/<projectId>/"
    )
    workspace_base_url: str | None = Field(
        None, description="sys.workspace_url is this plus sys.workspace_path"
    )
    history_context_limit: int = Field(
        0, ge=0, le=200, description="Group messages the bot saw but was not asked about, per turn"
    )
    history_context_window_seconds: int = Field(
        3600, ge=1, description="How long such group messages are kept for context"
    )
    memory_admins: list[str] = Field(
        default_factory=list,
        description="Sender ids allowed to /remember and /forget; empty: everyone in the chat",
    )
    routes: list[Route] = Field(default_factory=list)

    @model_validator(mode="after")
    def _windows(self) -> IntegrationBase:
        if self.max_window_seconds < self.summary_window_seconds:
            raise ValueError("maxWindowSeconds must be at least summaryWindowSeconds")
        return self

    @field_validator("timezone")
    @classmethod
    def _tz(cls, value: str | None) -> str | None:
        if value is not None:
            from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

            try:
                ZoneInfo(value)
            except (ZoneInfoNotFoundError, ValueError) as exc:
                raise ValueError(f"unknown time zone {value!r}") from exc
        return value


class Settings(GatewayModel):
    server: ServerSettings = Field(default_factory=ServerSettings)
    redis: RedisSettings = Field(default_factory=RedisSettings)
    data_dir: Path = Field(
        Path(".gateway"),
        description="Embedded Redis data and the spool; relative to the working directory",
    )
    admin: AdminSettings = Field(default_factory=AdminSettings)
    logging: LoggingSettings = Field(default_factory=LoggingSettings)
    runtime: RuntimeSettings = Field(default_factory=RuntimeSettings)
    experts: list[ExpertSettings] = Field(min_length=1)
    integrations: list[IntegrationBase] = Field(default_factory=list)

    @model_validator(mode="after")
    def _cross_check(self) -> Settings:
        problems: list[str] = []
        for section in ("experts", "integrations"):
            seen: set[str] = set()
            for i, item in enumerate(getattr(self, section)):
                if item.id in seen:
                    problems.append(f"{section}.{i}.id: duplicate id {item.id!r}")
                seen.add(item.id)
        experts = {e.id for e in self.experts}
        kinds = {e.id: e.kind for e in self.experts}
        for i, integ in enumerate(self.integrations):
            if integ.busy_policy == "steer":
                # Where the running expert cannot be steered the message is collected instead;
                # an integration none of whose experts can be steered is a mistake.
                used = {integ.xpert_id, *(r.xpert_id for r in integ.routes)}
                if not any(kinds.get(x) == "xpert" for x in used):
                    problems.append(
                        f"integrations.{i}.busyPolicy: steer needs an expert of kind xpert "
                        f"(this integration uses {', '.join(sorted(used))})"
                    )
            if integ.xpert_id not in experts:
                problems.append(
                    f"integrations.{i}.xpertId: {integ.xpert_id!r} names no expert "
                    f"(experts: {', '.join(sorted(experts))})"
                )
            for j, route in enumerate(integ.routes):
                if route.xpert_id not in experts:
                    problems.append(
                        f"integrations.{i}.routes.{j}.xpertId: {route.xpert_id!r} names no expert"
                    )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def integration(self, integration_id: str) -> IntegrationBase | None:
        for integ in self.integrations:
            if integ.id == integration_id:
                return integ
        return None

    def expert(self, expert_id: str) -> AnyExpert | None:
        for expert in self.experts:
            if expert.id == expert_id:
                return expert
        return None


def build_settings_model(integration_models: Mapping[str, type[IntegrationBase]]) -> type[Settings]:
    """A Settings model whose ``integrations`` accept the installed adapters' models."""
    models = tuple(integration_models[k] for k in sorted(integration_models))
    if not models:
        return Settings
    item: Any = (
        models[0] if len(models) == 1 else Annotated[Union[models], Field(discriminator="platform")]  # noqa: UP007
    )
    model: type[Settings] = create_model(
        "GatewaySettings",
        __base__=Settings,
        integrations=(list[item], Field(default_factory=list)),
    )
    return model


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


def load_settings(
    source: Path | str | Mapping[str, Any],
    *,
    model: type[Settings] = Settings,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Read, substitute and validate a config file (or an already parsed mapping)."""
    if isinstance(source, Mapping):
        raw: Any = dict(source)
    else:
        path = Path(source)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError([f"{path}: cannot read: {exc.strerror}"]) from exc
        try:
            raw = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError([f"{path}: not valid YAML: {exc}"]) from exc
    if not isinstance(raw, dict):
        raise ConfigError(["(top level): expected a mapping of settings"])
    # Unset variables and validation errors are reported together, so one run shows them all.
    raw, problems = substitute_env(raw, os.environ if env is None else env)
    try:
        settings = model.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(problems + _format_errors(exc, raw)) from exc
    if problems:
        raise ConfigError(problems)
    return settings


def snapshot_of(integration: IntegrationBase, expert: AnyExpert, xpert_id: str) -> tuple[str, str]:
    """The config a new session locks in (secrets excluded), as JSON and its hash."""
    data = {
        "xpertId": xpert_id,
        "expert": expert.model_dump(mode="json", by_alias=True),
        "integration": integration.model_dump(
            mode="json",
            by_alias=True,
            include={
                "variables",
                "project_id",
                "workspace_base_url",
                "id",
                "platform",
                "session_timeout_seconds",
                "session_scope",
                "update_interval_ms",
                "language",
                "timezone",
                "busy_policy",
            },
        ),
    }
    body = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return body, snapshot_digest(data)


def snapshot_digest(snapshot: Mapping[str, Any]) -> str:
    """Content address of a snapshot: sessions with the same config share one stored copy."""
    body = json.dumps(snapshot, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()[:24]
