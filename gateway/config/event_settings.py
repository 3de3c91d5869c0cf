"""Settings of external events (``integrations[].events``): the signed webhooks an integration
takes at ``POST /api/events/{integrationId}/{source}``, the chat each posts into, and with what
instruction. A module of its own, importing only the settings base, so
``gateway.config.settings`` can use it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, field_validator

from gateway.config.model import GatewayModel

EventSourceName = Literal["github", "gitlab", "generic"]

# ``event`` admits every action of the event, ``event.action`` that action only. The defaults are
# the state changes of a pull request / merge request, an issue and a CI run; comments, labels,
# reviews and approvals are left out (add them to ``types``).
DEFAULT_TYPES: dict[str, tuple[str, ...]] = {
    "github": (
        "pull_request.opened",
        "pull_request.reopened",
        "pull_request.synchronize",
        "pull_request.ready_for_review",
        "pull_request.closed",
        "issues.opened",
        "issues.reopened",
        "issues.closed",
        "workflow_run",
        "check_suite.completed",
    ),
    "gitlab": (
        "merge_request.open",
        "merge_request.reopen",
        "merge_request.update",
        "merge_request.merge",
        "merge_request.close",
        "pipeline",
    ),
    "generic": (),  # a generic event has no type: every one is taken
}


class EventSource(GatewayModel):
    """One signed webhook source of an integration (at most one per source)."""

    source: EventSourceName = Field(description="github, gitlab or generic")
    secret: SecretStr = Field(
        description="github and generic: the HMAC-SHA256 key of the signature; gitlab: the "
        "secret token GitLab sends in X-Gitlab-Token"
    )
    chat_id: str = Field(min_length=1, max_length=256, description="The chat the cards go to")
    chat_type: Literal["p2p", "group"] = "group"
    xpert_id: str | None = Field(None, description="The expert of these events (else routes)")
    text: str | None = Field(
        None, max_length=4000, description="Instruction put before each event's summary"
    )
    types: list[str] | None = Field(
        None,
        description="Event types to act on, 'event' or 'event.action' (github: pull_request, "
        "issues, workflow_run, check_suite; gitlab: merge_request, pipeline); others are "
        "answered 202 ignored. Default: the state changes of each",
    )
    allowed_chat_ids: list[str] = Field(
        default_factory=list,
        description="generic: other chats an event's own chatId may pick (same chatType); a "
        "chatId not listed is ignored and the event goes to chatId",
    )
    card_ttl_hours: float = Field(
        168, gt=0, le=24 * 366, description="How long an open object's card is kept for updates"
    )
    replay_window_seconds: int = Field(
        300,
        ge=0,
        le=86_400,
        description="generic: an event whose sentAt (unix seconds, in the signed body) is further "
        "than this from now is refused (401); 0 turns the check off",
    )

    @field_validator("secret")
    @classmethod
    def _secret(cls, value: SecretStr) -> SecretStr:
        if not value.get_secret_value():
            raise ValueError("must not be empty")
        return value

    def allows(self, event_type: str, action: str | None) -> bool:
        """Whether an event of ``event_type`` (with ``action``) starts or updates a turn."""
        wanted = DEFAULT_TYPES[self.source] if self.types is None else self.types
        return event_type in wanted or (action is not None and f"{event_type}.{action}" in wanted)


def unique_sources(events: list[EventSource]) -> list[EventSource]:
    """A validator for ``integrations[].events``: one entry per source (the path names it)."""
    seen = [e.source for e in events]
    doubled = sorted({s for s in seen if seen.count(s) > 1})
    if doubled:
        raise ValueError(f"one entry per source; {', '.join(doubled)} appears more than once")
    return events
