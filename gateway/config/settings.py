"""The settings model: every section of the file, the checks across sections (ids unique, every
id naming something), and :func:`build_settings_model`, which takes the integration models of
the installed adapters and the expert models of the installed expert kinds (entry points), so
the core never names a platform's or a backend's fields (docs/architecture.md, "Configuration")."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Union

from pydantic import AfterValidator, Field, SecretStr, create_model, model_validator

from gateway.config.archive import ArchiveSettings
from gateway.config.audit import AuditSettings
from gateway.config.bases import ExpertBase, ExpertKind, IntegrationBase
from gateway.config.masking import unmask
from gateway.config.mcp import McpSettings
from gateway.config.model import GatewayModel
from gateway.config.redis import RedisSettings
from gateway.config.route import bundle_problems
from gateway.config.runtime import LoggingSettings, RuntimeSettings
from gateway.config.schedule_settings import Schedules, problems_of
from gateway.config.server import AdminSettings, ServerSettings
from gateway.config.watch import watch_problems
from sessions.audit import AuditLimits


def _secrets(expert: ExpertBase) -> dict[str, str]:
    """The expert's secret fields by alias, in clear (snapshots keep them masked)."""
    out: dict[str, str] = {}
    for name, field in type(expert).model_fields.items():
        value = getattr(expert, name)
        if isinstance(value, SecretStr):
            out[field.alias or name] = value.get_secret_value()
    return out


def rebuild_expert(
    snapshot: Mapping[str, Any], current: ExpertBase | None, kinds: Mapping[str, type[ExpertKind]]
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
        data = unmask(data, current.model_dump(mode="json", by_alias=True))  # URL credentials
    return kind.settings_model.model_validate(data)


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
    archive: ArchiveSettings = Field(default_factory=ArchiveSettings)
    experts: list[ExpertBase] = Field(min_length=1)
    integrations: list[IntegrationBase] = Field(default_factory=list)
    schedules: Schedules = Field(default_factory=list, description="Turns started by a cron")
    mcp: McpSettings = Field(
        default_factory=McpSettings, description="The MCP server of chat actions (docs/mcp.md)"
    )

    # The installed expert kinds the model was built for (build_settings_model).
    expert_kinds: ClassVar[Mapping[str, type[ExpertKind]]] = {}

    @model_validator(mode="after")
    def _cross_check(self) -> Settings:
        problems: list[str] = self.redis.problems() + self.admin.problems()
        problems += self.archive.problems()
        for section in ("experts", "integrations"):
            seen: set[str] = set()
            for i, item in enumerate(getattr(self, section)):
                if item.id in seen:
                    problems.append(f"{section}.{i}.id: duplicate id {item.id!r}")
                seen.add(item.id)
        experts = {e.id for e in self.experts}
        problems += self.mcp.problems(experts)
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
        for i, schedule in enumerate(self.schedules):
            problems += problems_of(schedule, self.integrations, self.experts, f"schedules.{i}")
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

    def audit_limits(self) -> AuditLimits:
        """The audit trail's bounds, with the archive outbox's when the archive is on."""
        outbox = self.archive.outbox_max_length if self.archive.enabled else 0
        return self.audit.limits(outbox_max=outbox)

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
    expert_kinds: Mapping[str, type[ExpertKind]],
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
