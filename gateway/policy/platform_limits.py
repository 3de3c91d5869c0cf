"""``platformLimits``: what a platform lets one app call, per API and per month, with each
platform's published figures as defaults (``docs/platform-limits.md``) and every figure
overridable per integration, since tenants and editions differ. The budget that enforces them,
shared by every replica, is ``gateway.edge.call_budget``."""

from __future__ import annotations

from pydantic import Field

from gateway.config.model import GatewayModel

__all__ = ["ApiLimits", "PlatformLimits", "platform_defaults"]


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
        description="The tenant's monthly API quota (Feishu Basic: 10000; DingTalk Standard: "
        "5000); cards spend less as it nears its end",
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


# The platforms' published figures (docs/<platform>.md, "Limits", with the doc sources).
_DEFAULTS = {
    # Lark: 50/s and 1,000/min per API per app; 5 sends/s to one chat (频控策略.md l.55-82,
    # 发送消息.md l.21). CardKit's page says updates while streaming_mode is on "不会触发接口的
    # 频率限制（QPS）" (流式更新卡片.md l.33, 61), yet each CardKit API's page still names
    # 1000/min & 50/s: streaming text is metered like the rest unless unmeteredApis says
    # otherwise (docs/platform-limits.md).
    "lark": PlatformLimits(calls_per_second=50, calls_per_minute=1000, chat_sends_per_second=5),
    # DingTalk Standard edition: 20 calls/s per app per API (how-to-process-api-throttling…).
    "dingtalk": PlatformLimits(calls_per_second=20),
    # WeCom: 10,000/min and 150,000/h per company per API; app messages 30/min and 1,000/h to
    # one member, the excess silently dropped (访问频率限制.md l.15-22).
    "wecom": PlatformLimits(
        calls_per_minute=10_000,
        calls_per_hour=150_000,
        chat_sends_per_minute=30,
        chat_sends_per_hour=1000,
    ),
}


def platform_defaults(platform: str) -> PlatformLimits:
    """The published limits of ``platform``; a platform without any is not paced."""
    return _DEFAULTS.get(platform, PlatformLimits(enabled=False))
