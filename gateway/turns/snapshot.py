"""A session's config snapshot, read through typed models.

A new session locks in its expert and integration options (docs/architecture.md, "Sessions"); the
snapshot is stored content-addressed as JSON (:func:`snapshot_of`) and read back here, so the runner
never spells a
camelCase key."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gateway.config.bases import ExpertBase, IntegrationBase, VariableDecl
from gateway.config.masking import mask_urls
from gateway.config.settings import Settings

# The integration options a session keeps (``snapshot_of``), read back by SnapshotOptions.
KEPT_OPTIONS = {
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
}


def snapshot_of(
    integration: IntegrationBase,
    expert: ExpertBase,
    xpert_id: str,
    bundle: Mapping[str, Any] | None = None,
) -> tuple[str, str]:
    """The config a new session locks in (secrets excluded), as JSON and its hash; ``bundle``:
    what its route gives it (gateway/policy/bundles.py; absent without one, so that configs without
    routes keep their digests)."""
    data: dict[str, Any] = {
        "xpertId": xpert_id,
        "expert": mask_urls(expert.model_dump(mode="json", by_alias=True)),
        "integration": integration.model_dump(mode="json", by_alias=True, include=KEPT_OPTIONS),
    }
    if bundle:
        data["bundle"] = dict(bundle)
    return json.dumps(data, sort_keys=True, separators=(",", ":")), snapshot_digest(data)


def snapshot_digest(snapshot: Mapping[str, Any]) -> str:
    """Content address of a snapshot: sessions with the same config share one stored copy."""
    body = json.dumps(snapshot, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()[:24]


class SnapshotOptions(BaseModel):
    """The integration options a session keeps (the ``integration`` part of a snapshot)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    id: str
    platform: str = ""
    variables: list[VariableDecl] = Field(default_factory=list)
    project_id: str | None = Field(None, alias="projectId")
    workspace_base_url: str | None = Field(None, alias="workspaceBaseUrl")
    session_timeout_seconds: int = Field(3600, alias="sessionTimeoutSeconds")
    update_interval_ms: int = Field(1000, alias="updateIntervalMs")
    language: str | None = None
    timezone: str | None = None


@dataclass(frozen=True)
class SessionSnapshot:
    digest: str
    data: dict[str, Any]  # the stored form
    xpert_id: str
    options: SnapshotOptions

    @classmethod
    def of(cls, data: dict[str, Any], digest: str | None = None) -> SessionSnapshot:
        return cls(
            digest=digest or snapshot_digest(data),
            data=data,
            xpert_id=str(data["xpertId"]),
            options=SnapshotOptions.model_validate(data["integration"]),
        )

    @classmethod
    def parse(cls, text: str, digest: str | None = None) -> SessionSnapshot:
        return cls.of(json.loads(text), digest)

    def expert(self, settings: Settings) -> ExpertBase:
        """The session's expert settings, with the secrets of the current config put back."""
        return settings.expert_from_snapshot(self.data["expert"])

    @cached_property
    def bundle_variables(self) -> dict[str, Any]:
        """The conversation variables the session's route starts it with."""
        return dict(self.data.get("bundle", {}).get("variables", {}))

    @cached_property
    def declared(self) -> list[VariableDecl]:
        """Conversation variables declared by the integration and by the expert."""
        by_expert = [
            VariableDecl.model_validate(v) for v in self.data["expert"].get("variables", [])
        ]
        return [*self.options.variables, *by_expert]
