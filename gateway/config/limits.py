"""A budget (``limits``): turns per hour per chat and per sender, tokens per day per chat. An
integration has one, a route may override it key by key (``gateway.policy.budgets`` counts)."""

from __future__ import annotations

from pydantic import Field

from gateway.config.model import GatewayModel


class Limits(GatewayModel):
    """A budget. Each limit unset or null is unlimited; a route's limits override the
    integration's one by one (a route giving null lifts the integration's)."""

    turns_per_hour_per_chat: int | None = Field(
        None, ge=1, description="Turns a chat may start in any 60 minutes (a merged burst is one)"
    )
    turns_per_hour_per_sender: int | None = Field(
        None, ge=1, description="Turns one sender may start in a chat in any 60 minutes"
    )
    tokens_per_day_per_chat: int | None = Field(
        None,
        ge=1,
        description="Tokens the expert reported for a chat's turns today (the integration's "
        "time zone); checked when a message arrives, so the turn that crosses it runs to its end",
    )

    def over(self, override: Limits | None) -> Limits:
        """These limits with those ``override`` sets (explicitly, null included) replaced."""
        if override is None or not override.model_fields_set:
            return self
        return self.model_copy(update={k: getattr(override, k) for k in override.model_fields_set})

    def as_json(self) -> dict[str, int | None]:
        return {
            "turnsPerHourPerChat": self.turns_per_hour_per_chat,
            "turnsPerHourPerSender": self.turns_per_hour_per_sender,
            "tokensPerDayPerChat": self.tokens_per_day_per_chat,
        }
