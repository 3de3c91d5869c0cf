"""Lark / Feishu integration options (docs/lark.md; the XpertAI Lark plugin's option names)."""

from __future__ import annotations

from typing import ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator

from gateway.config.bases import IntegrationBase, PlatformLimits
from gateway.edge.downloads import LOCAL_HOSTS


class LarkIntegration(IntegrationBase):
    """A Lark or Feishu custom app bot."""

    platform: Literal["lark"]
    # `check` says "did you mean" for these (Feishu is Lark in mainland China: the same adapter).
    platform_aliases: ClassVar[tuple[str, ...]] = ("feishu", "larksuite", "飞书")
    # The defaults of platformLimits (docs/lark.md, "Limits"): 50/s and 1,000/min per API per
    # app; 5 sends/s to one chat (频控策略.md l.55-82, 发送消息.md l.21). CardKit's page says
    # updates while streaming_mode is on "不会触发接口的频率限制（QPS）" (流式更新卡片.md l.33, 61),
    # yet each CardKit API's page still names 1000/min & 50/s: streaming text is metered like
    # the rest unless unmeteredApis says otherwise (docs/platform-limits.md). The APIs that send
    # to a chat: LarkApi.chat_endpoints.
    published_limits: ClassVar[PlatformLimits | None] = PlatformLimits(
        calls_per_second=50, calls_per_minute=1000, chat_sends_per_second=5
    )
    app_id: str = Field(min_length=1, description="App ID (cli_…)")
    app_secret: SecretStr = Field(description="App Secret")
    verification_token: SecretStr | None = Field(
        None, description="Verification Token of the event subscription (required for webhooks)"
    )
    encrypt_key: SecretStr | None = Field(
        None, description="Encrypt Key: webhook bodies are AES-encrypted and signed when set"
    )
    connection_mode: Literal["webhook", "long_connection"] = Field(
        "webhook",
        description="webhook: Lark POSTs to us; long_connection: we dial Lark's WebSocket",
    )
    api_base: str = Field(
        "https://open.feishu.cn",
        description="OpenAPI origin: https://open.feishu.cn, https://open.larksuite.com, or a fake",
    )
    card_mode: Literal["patch", "cardkit"] = Field(
        "patch", description="patch: update the card message; cardkit: CardKit streaming"
    )
    typing_reaction: bool = Field(
        True, description="Put a 'Typing' reaction on the user's message while the bot works"
    )
    lookup_sender_email: bool = Field(
        True,
        description="Look up the sender's email (contact API, cached a day) for sys.user_email",
    )
    timestamp_tolerance_seconds: int = Field(
        300, ge=1, le=86_400, description="Webhooks whose request timestamp is further off are 401"
    )

    @field_validator("api_base")
    @classmethod
    def _origin(cls, value: str) -> str:
        parts = urlsplit(value)
        if (
            parts.scheme not in ("http", "https")
            or not parts.hostname
            or parts.path not in ("", "/")
        ):
            raise ValueError("apiBase must be an origin like https://open.feishu.cn (no path)")
        if parts.scheme == "http" and parts.hostname not in LOCAL_HOSTS:
            raise ValueError("apiBase may use plain http only for a local fake (127.0.0.1)")
        return value.rstrip("/")

    @field_validator("app_secret", "verification_token", "encrypt_key")
    @classmethod
    def _not_empty(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value():
            raise ValueError("must not be empty")
        return value

    @model_validator(mode="after")
    def _webhook_needs_token(self) -> LarkIntegration:
        if self.connection_mode == "webhook" and self.verification_token is None:
            raise ValueError("a webhook integration needs verificationToken")
        return self
