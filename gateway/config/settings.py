"""Configuration: YAML validated by pydantic, camelCase keys, ``${ENV}`` substitution (§4).

Integration models come from the installed adapters and expert models from the installed expert
kinds (entry points), so the core never names a platform's or a backend's fields;
:func:`build_settings_model` assembles the unions of whatever is installed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Union

from pydantic import (
    AfterValidator,
    Field,
    SecretStr,
    create_model,
    field_validator,
    model_validator,
)

from gateway.config.audit import AuditSettings
from gateway.config.model import GatewayModel as GatewayModel
from gateway.config.redis import RedisSettings as RedisSettings
from gateway.config.server import AdminSettings as AdminSettings
from gateway.config.server import ServerSettings as ServerSettings
from gateway.config.server import cpu_count as cpu_count
from gateway.policy.bundles import Limits, bundle_problems
from gateway.policy.bundles import Route as Route
from gateway.triggers.event_settings import EventSource, unique_sources
from gateway.triggers.schedule_settings import Schedules
from gateway.triggers.watch import Watches, watch_problems

if TYPE_CHECKING:
    from gateway.experts.base import Expert

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class ConfigError(ValueError):
    """A configuration problem, one ``path: reason`` line per problem."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class ConfigFileError(ConfigError):
    """The file itself could not be used: missing, unreadable, empty or not YAML."""


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
    due_shards: int = Field(
        16,
        ge=1,
        le=1024,
        description="Conversations are spread over this many due shards (hash slots on a Redis "
        "Cluster); every replica on a keyPrefix must use the same number",
    )
    poll_interval_ms: int = Field(
        200, ge=10, le=5000, description="How often the flusher looks for work of other replicas"
    )
    connection_lease_seconds: float = Field(
        15,
        ge=1,
        description="Long connections (Lark, DingTalk stream, WeCom aibot_ws) are held by one "
        "process of all; another takes over within this long after it died",
    )
    spool_max_bytes: int = Field(
        64 * 1024 * 1024,
        ge=0,
        description="Bound of the local spool (dataDir/spool) that keeps long-connection events "
        "while Redis is unreachable; 0 turns it off",
    )


class ExpertBase(GatewayModel):
    """Options every expert has. Each expert kind (an ``Expert`` subclass registered under the
    ``xpert_gateway.experts`` entry points) brings a subclass with ``kind: Literal["<kind>"]``."""

    id: str = Field(pattern=ID_PATTERN)
    kind: str


def http_url(value: str) -> str:
    """A validator for base URLs: http(s) only, without the trailing slash."""
    if not value.startswith(("http://", "https://")):
        raise ValueError("must be an http:// or https:// URL")
    return value.rstrip("/")


def _secrets(expert: ExpertBase) -> dict[str, str]:
    """The expert's secret fields by alias, in clear (snapshots keep them masked)."""
    out: dict[str, str] = {}
    for name, field in type(expert).model_fields.items():
        value = getattr(expert, name)
        if isinstance(value, SecretStr):
            out[field.alias or name] = value.get_secret_value()
    return out


def rebuild_expert(
    snapshot: Mapping[str, Any], current: ExpertBase | None, kinds: Mapping[str, type[Expert]]
) -> ExpertBase:
    """A session's expert settings, validated again by the model of its kind. Snapshots hold no
    secrets (they are masked there): those of ``current``, the expert with the same id in the
    current config, are put back when it is still of the same kind."""
    data = dict(snapshot)
    kind = kinds.get(str(data.get("kind")))
    if kind is None:
        raise ValueError(f"expert kind {data.get('kind')!r} is not installed")
    if current is not None and current.id == data.get("id") and current.kind == data["kind"]:
        data.update(_secrets(current))
    return kind.settings_model.model_validate(data)


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
        description="A message arriving during a run: next turn, into the running agent (experts "
        "that can be steered), or a 'busy' answer",
    )
    max_buffered_messages: int = Field(
        100,
        ge=1,
        le=100_000,
        description="Messages a conversation may have waiting for its turn; past it a message "
        "is refused (the chat is told once) rather than stored",
    )
    max_buffered_bytes: int = Field(
        2 * 1024 * 1024,
        ge=64 * 1024,
        le=512 * 1024 * 1024,
        description="Bytes (stored JSON) a conversation may have waiting for its turn; past "
        "it a message is refused (the chat is told once)",
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
    max_attachments_per_turn: int = Field(
        10,
        ge=0,
        le=100,
        description="Attachments a turn hands its expert; those past it are left out, and the "
        "card says so",
    )
    max_attachment_bytes_per_turn: int = Field(
        20 * 1024 * 1024,
        ge=0,
        description="Bytes of pictures a turn downloads for its expert (each at most 10 MiB); "
        "those past it are left out, and the card says so",
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
    schedule_admins: list[str] = Field(default_factory=list, description="Who may schedule")
    schedule_min_interval_seconds: int = Field(
        300,
        ge=0,
        le=86_400,
        description="Schedules made in a chat (/schedule, routines) must not fire more often "
        "than this; 0: no minimum. The admin API and the config file are not held to it",
    )
    approvers: list[str] = Field(
        default_factory=list,
        description="Sender ids who may also answer Confirm / Reject of another's turn; empty: "
        "only the sender of the interrupted turn (routes may set their own)",
    )
    routes: list[Route] = Field(default_factory=list, description="Access bundles per chat")
    limits: Limits = Field(default_factory=Limits, description="Budgets; routes override them")
    watches: Watches = Field(default_factory=list, description="Group watch: start turns unasked")
    events: Annotated[list[EventSource], AfterValidator(unique_sources)] = Field(
        default_factory=list, description="Signed external events (GitHub, GitLab, generic)"
    )

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
    audit: AuditSettings = Field(default_factory=AuditSettings)
    experts: list[ExpertBase] = Field(min_length=1)
    integrations: list[IntegrationBase] = Field(default_factory=list)
    schedules: Schedules = Field(default_factory=list, description="Turns started by a cron")

    # The installed expert kinds the model was built for (build_settings_model).
    expert_kinds: ClassVar[Mapping[str, type[Expert]]] = {}

    @model_validator(mode="after")
    def _cross_check(self) -> Settings:
        problems: list[str] = self.redis.problems() + self.admin.problems()
        for section in ("experts", "integrations"):
            seen: set[str] = set()
            for i, item in enumerate(getattr(self, section)):
                if item.id in seen:
                    problems.append(f"{section}.{i}.id: duplicate id {item.id!r}")
                seen.add(item.id)
        experts = {e.id for e in self.experts}
        steerable = {e.id for e in self.experts if self._steerable(e.kind)}
        for i, integ in enumerate(self.integrations):
            if integ.busy_policy == "steer":
                # Where the running expert cannot be steered the message is collected instead;
                # an integration none of whose experts can be steered is a mistake.
                used = {integ.xpert_id, *(r.xpert_id or integ.xpert_id for r in integ.routes)}
                if not used & steerable:
                    problems.append(
                        f"integrations.{i}.busyPolicy: steer needs {self._steerable_text()} "
                        f"(this integration uses {', '.join(sorted(used))})"
                    )
            if integ.xpert_id not in experts:
                problems.append(
                    f"integrations.{i}.xpertId: {integ.xpert_id!r} names no expert "
                    f"(experts: {', '.join(sorted(experts))})"
                )
            problems += watch_problems(
                f"integrations.{i}", integ.watches, experts, integ.group_reply_strategy
            )
            problems += bundle_problems(f"integrations.{i}", integ.routes, experts)
            for j, ev in enumerate(integ.events):
                if ev.xpert_id is not None and ev.xpert_id not in experts:
                    problems.append(f"integrations.{i}.events.{j}.xpertId: names no expert")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _steerable(self, kind: str) -> bool:
        found = self.expert_kinds.get(kind)
        return found is not None and found.supports_steer

    def _steerable_text(self) -> str:
        kinds = sorted(k for k in self.expert_kinds if self._steerable(k))
        if not kinds:
            return "an expert that can be steered, and no installed expert kind can be"
        return f"an expert of kind {' or '.join(kinds)}"

    def integration(self, integration_id: str) -> IntegrationBase | None:
        for integ in self.integrations:
            if integ.id == integration_id:
                return integ
        return None

    def expert(self, expert_id: str) -> ExpertBase | None:
        for expert in self.experts:
            if expert.id == expert_id:
                return expert
        return None

    def expert_from_snapshot(self, snapshot: Mapping[str, Any]) -> ExpertBase:
        """A session's expert settings from its snapshot, with this config's secrets put back."""
        current = self.expert(str(snapshot.get("id", "")))
        return rebuild_expert(snapshot, current, self.expert_kinds)


def build_settings_model(
    integration_models: Mapping[str, type[IntegrationBase]],
    expert_kinds: Mapping[str, type[Expert]],
) -> type[Settings]:
    """A Settings model whose ``integrations`` accept the installed adapters' models and whose
    ``experts`` accept the installed expert kinds' models (discriminated by ``kind``)."""
    fields: dict[str, Any] = {}
    models = tuple(integration_models[k] for k in sorted(integration_models))
    if models:
        item: Any = (
            models[0]
            if len(models) == 1
            else Annotated[Union[models], Field(discriminator="platform")]  # noqa: UP007
        )
        fields["integrations"] = (list[item], Field(default_factory=list))
    kinds = tuple(expert_kinds[k].settings_model for k in sorted(expert_kinds))
    expert: Any = (
        Annotated[Union[kinds], Field(discriminator="kind")]  # noqa: UP007
        if kinds
        else Annotated[ExpertBase, AfterValidator(_no_kind_installed)]
    )
    fields["experts"] = (list[expert], Field(min_length=1))
    model: type[Settings] = create_model("GatewaySettings", __base__=Settings, **fields)
    model.expert_kinds = dict(expert_kinds)
    return model


def _no_kind_installed(expert: ExpertBase) -> ExpertBase:
    raise ValueError(
        f"unknown kind {expert.kind!r} (no expert kind is installed: reinstall the package)"
    )
