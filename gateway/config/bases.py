"""The base models installed plugins subclass: :class:`IntegrationBase` (what every integration
has; each adapter adds its platform's fields) and :class:`ExpertBase` (what every expert has;
each expert kind adds its backend's fields), with the conversation variables both declare.
``gateway.config.settings`` assembles the unions of whatever is installed."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, Field, field_validator, model_validator

from gateway.config.cron import unknown_zone
from gateway.config.event_settings import EventSource, unique_sources
from gateway.config.limits import Limits
from gateway.config.model import ID_PATTERN, GatewayModel, media_host
from gateway.config.platform_limits import PlatformLimits as PlatformLimits
from gateway.config.route import Route
from gateway.config.watch import Watches

MAX_ATTACHMENT_BYTES = 36 * 1024 * 1024  # see max_attachment_bytes_per_turn


class ExpertBase(GatewayModel):
    """Options every expert has. Each expert kind (an ``Expert`` subclass registered under the
    ``xpert_gateway.experts`` entry points) brings a subclass with ``kind: Literal["<kind>"]``."""

    id: str = Field(pattern=ID_PATTERN)
    kind: str
    media_hosts: list[str] = Field(
        default_factory=list,
        description="Hosts the answer's images and files may be fetched from, besides the "
        "expert's own origin (its baseUrl): 'files.example.com', 'files.example.com:8443' or "
        "'https://files.example.com'; https only, except a local host "
        "('http://127.0.0.1:9000')",
    )

    @field_validator("media_hosts")
    @classmethod
    def _media_hosts(cls, value: list[str]) -> list[str]:
        for entry in value:
            media_host(entry)
        return value


class ExpertKind:
    """What the settings know of an expert kind (``gateway.experts.base.Expert`` subclasses
    it): its ``kind``, its settings model, and what it can do, declared on the class."""

    kind: ClassVar[str]
    settings_model: ClassVar[type[ExpertBase]]
    # Whether a running run takes follow-up messages (``steer``): busyPolicy steer needs it.
    supports_steer: ClassVar[bool] = False
    # What a route's access bundle may set on this kind (gateway/policy/bundles.py): of
    # BUNDLE_OPTIONS (gateway/experts/base.py), each a field of ``settings_model`` that the
    # route's value replaces.
    bundle_options: ClassVar[frozenset[str]] = frozenset()
    # Whether only declared conversation variables reach the backend (route variables that are
    # not declared are then warned about by ``check``).
    declared_variables_only: ClassVar[bool] = False

    @classmethod
    def acts_as_sender(cls, settings: ExpertBase) -> bool:
        """Whether a group turn of this expert acts as its sender (a backend user per sender):
        then the gateway never puts two senders' messages into one turn or one run (a burst is
        split by sender, a steer goes only into the same sender's run; issue 36)."""
        return False


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
    """Options every integration has; adapters subclass it with their platform fields and
    declare their platform: ``platform_aliases`` (other names users give it: ``check`` says
    "did you mean") and ``published_limits`` (its published per-app limits, the defaults of
    ``platformLimits``; ``PlatformLimits(enabled=False)`` for a platform that publishes none;
    left None, the integration runs unpaced and ``check`` says so)."""

    platform_aliases: ClassVar[tuple[str, ...]] = ()
    published_limits: ClassVar[PlatformLimits | None] = None
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
    max_answer_parts: int = Field(
        10,
        ge=1,
        le=1000,
        description="An answer longer than this many messages is sent as one file, answer.md, "
        "the card showing its head (where the platform takes files: docs/<platform>.md)",
    )
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
        # XpertAI refuses a JSON body over 50 MB (xpert-ai/xpert packages/server/src/bootstrap/
        # index.ts l.45) and a run carries its pictures inline as base64 (4/3 of their bytes):
        # 36 MiB is 48 MiB of base64, leaving room for the message and its state.
        le=MAX_ATTACHMENT_BYTES,
        description="Bytes of pictures and files a turn downloads for its expert (each picture "
        "at most 10 MiB; at most 36 MiB, so a run's request stays under XpertAI's 50 MB); "
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
    platform_limits: PlatformLimits = Field(
        default_factory=PlatformLimits,
        description="The platform's limits on this app's calls (defaults: the platform's "
        "published figures), shared by every replica",
    )
    watches: Watches = Field(default_factory=list, description="Group watch: start turns unasked")
    events: Annotated[list[EventSource], AfterValidator(unique_sources)] = Field(
        default_factory=list, description="Signed external events (GitHub, GitLab, generic)"
    )

    def weak_sender_proof(self) -> str:
        """Why a signed event of this integration does not prove its sender ("" when it does):
        ``check`` warns when such an integration's turns act as their senders (issue 36)."""
        return ""

    @model_validator(mode="after")
    def _windows(self) -> IntegrationBase:
        if self.max_window_seconds < self.summary_window_seconds:
            raise ValueError("maxWindowSeconds must be at least summaryWindowSeconds")
        return self

    @field_validator("timezone")
    @classmethod
    def _tz(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                ZoneInfo(value)
            except (ZoneInfoNotFoundError, ValueError) as exc:
                raise ValueError(unknown_zone(value)) from exc
        return value
