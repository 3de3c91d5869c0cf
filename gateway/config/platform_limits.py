"""``platformLimits``: what a platform lets one app call, per API and per month, with each
platform's published figures as defaults (``docs/platform-limits.md``) and every figure
overridable per integration, since tenants and editions differ. Each adapter declares its
platform's figures (its settings model's ``published_limits``); the core names no platform. The
budget that enforces them, shared by every replica, is ``gateway.edge.call_budget``."""

from __future__ import annotations

from typing import ClassVar, Protocol

from pydantic import Field

from gateway.config.model import GatewayModel

__all__ = ["ApiLimits", "Declares", "PlatformLimits", "platform_defaults", "undeclared_limits"]


def _windows(*per: int | None) -> list[tuple[int, float]]:
    """(limit, seconds) of the figures set per second, minute and hour."""
    return [(n, s) for n, s in zip(per, (1.0, 60.0, 3600.0), strict=True) if n is not None]


class ApiLimits(GatewayModel):
    """Calls one app may make to one API; each unset figure is not limited."""

    calls_per_second: int | None = Field(None, ge=1, description="Calls in any 1 s, per API")
    calls_per_minute: int | None = Field(None, ge=1, description="Calls in any 60 s, per API")
    calls_per_hour: int | None = Field(None, ge=1, description="Calls in any hour, per API")

    def windows(self) -> list[tuple[int, float]]:
        """The (limit, seconds) windows these figures set."""
        return _windows(self.calls_per_second, self.calls_per_minute, self.calls_per_hour)


class PlatformLimits(ApiLimits):
    """One app's platform budget, shared by every replica and worker (Redis). Unset figures take
    the platform's published default (``platform_defaults``); null lifts one explicitly."""

    enabled: bool = Field(True, description="Pace this app's platform calls to its limits")
    chat_sends_per_second: int | None = Field(
        None, ge=1, description="Messages the app may send to one chat (or user) in any 1 s"
    )
    chat_sends_per_minute: int | None = Field(
        None, ge=1, description="Messages the app may send to one chat (or user) in any 60 s"
    )
    chat_sends_per_hour: int | None = Field(
        None, ge=1, description="Messages the app may send to one chat (or user) in any hour"
    )
    calls_per_month: int | None = Field(
        None,
        ge=1,
        description="The tenant's monthly API quota (the platform's page in docs/ gives each "
        "edition's); cards spend less as it nears its end",
    )
    month_utc_offset_hours: float = Field(
        8, ge=-12, le=14, description="The quota's month starts at midnight of this UTC offset"
    )
    apis: dict[str, ApiLimits] = Field(
        default_factory=dict,
        description="Per API (its short name in /metrics: reply, patch, card_stream...) "
        "figures that replace the app-wide ones",
    )
    unmetered_apis: list[str] = Field(
        default_factory=list,
        description="APIs exempt from the per-second/minute/hour figures (still counted "
        "against the month)",
    )
    max_wait_seconds: float = Field(
        120, ge=1, le=3600, description="A call waits at most this long for the budget"
    )

    def over(self, defaults: PlatformLimits) -> PlatformLimits:
        """These limits, with what they leave unset taken from ``defaults``."""
        return defaults.model_copy(update={k: getattr(self, k) for k in self.model_fields_set})

    def chat_windows(self) -> list[tuple[int, float]]:
        return _windows(
            self.chat_sends_per_second, self.chat_sends_per_minute, self.chat_sends_per_hour
        )

    def api_windows(self, endpoint: str) -> list[tuple[int, float]]:
        """The windows of ``endpoint``: its own figures when ``apis`` names it, else the app's;
        none for an unmetered API."""
        if endpoint in self.unmetered_apis:
            return []
        own = self.apis.get(endpoint)
        return own.windows() if own is not None else self.windows()


class Declares(Protocol):
    """An adapter's settings model: ``published_limits`` is its platform's published figures
    (``PlatformLimits(enabled=False)`` for one that publishes none), None when undeclared."""

    published_limits: ClassVar[PlatformLimits | None]


def platform_defaults(model: Declares | type[Declares]) -> PlatformLimits:
    """The published limits an adapter's settings model declares; one that declares none is
    not paced (``check`` says so: ``undeclared_limits``)."""
    declared = model.published_limits
    return declared if declared is not None else PlatformLimits(enabled=False)


def undeclared_limits(model: Declares | type[Declares]) -> bool:
    """Whether the adapter left its platform's limits undeclared (so it runs unpaced)."""
    return model.published_limits is None
