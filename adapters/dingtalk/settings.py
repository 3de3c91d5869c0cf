"""DingTalk integration options (docs/dingtalk.md): the robot's app credentials, how events
arrive (stream or HTTP), and the optional AI-card template."""

from __future__ import annotations

from typing import ClassVar, Literal
from urllib.parse import urlparse

from pydantic import Field, SecretStr, field_validator, model_validator
from yarl import URL

from gateway.config.bases import IntegrationBase, PlatformLimits
from gateway.edge.downloads import LOCAL_HOSTS

# A link's click is remembered for runtime.dedupTtlHours, which is at least 8 h: a link that
# lived longer could be clicked again once that record is gone (links.py).
LINK_TTL_MAX_S = 8 * 3600
# The public AI card DingTalk's own connector and channel SDKs stream into (DingTalk-Real-AI/
# dingtalk-openclaw-connector src/services/messaging/card.ts l.12; dingtalk-channel-sdk-go
# ``DefaultCardTemplateID``, dingtalk-channel-sdk-java ``Config.DEFAULT_CARD_TEMPLATE_ID``):
# variables msgContent (streamed), staticMsgContent, flowStatus, sys_full_json_obj, config.
# The older stream SDK's ``AIMarkdownCardInstance`` (open-dingtalk/dingtalk-stream-sdk-python
# dingtalk_stream/card_instance.py l.159) uses ``LEGACY_AI_MARKDOWN_TEMPLATE`` with the same
# keys; either may be set as aiCardTemplateId. No DingTalk page documents a public template.
AI_MARKDOWN_TEMPLATE = "02fcf2f4-5e02-4a85-b672-46d1f715543e.schema"
LEGACY_AI_MARKDOWN_TEMPLATE = "382e4302-551d-4880-bf29-a30acfab2e71.schema"


class DingTalkIntegration(IntegrationBase):
    """A DingTalk enterprise robot (an internal app with the robot capability)."""

    platform: Literal["dingtalk"]
    # `check` says "did you mean" for these (what users also call DingTalk).
    platform_aliases: ClassVar[tuple[str, ...]] = ("dingding", "钉钉")
    # The defaults of platformLimits (docs/dingtalk.md, "Limits"): Standard edition, 20 calls/s
    # per app per API (how-to-process-api-throttling…). The APIs that send to a chat:
    # DingTalkApi.chat_endpoints.
    published_limits: ClassVar[PlatformLimits | None] = PlatformLimits(calls_per_second=20)
    client_id: str = Field(min_length=1, description="The app's AppKey (Client ID)")
    client_secret: SecretStr = Field(description="The app's AppSecret (Client Secret)")
    robot_code: str | None = Field(
        None, description="The robot code for OpenAPI sends; defaults to clientId"
    )
    connection_mode: Literal["stream", "http"] = Field(
        "stream", description="stream: outbound WebSocket (no public URL needed); http: webhook"
    )

    def weak_sender_proof(self) -> str:
        if self.connection_mode != "http":
            return ""
        return (
            "connectionMode http: DingTalk's sign covers the timestamp, not the body, so whoever "
            "captures one request's headers may send a body naming any sender for up to "
            "signWindowSeconds (the gateway binds the pair to its first body's chat and sender; "
            "docs/security.md); use connectionMode stream"
        )

    api_base: str = Field(
        "https://api.dingtalk.com", description="OpenAPI and stream-open base URL"
    )
    card_template_id: str | None = Field(
        None,
        description="Your own AI card template id (docs/dingtalk.md); without it the public AI "
        "markdown card (aiCardTemplateId) answers, or markdown messages with cards: markdown",
    )
    cards: Literal["ai", "markdown"] = Field(
        "ai",
        description="ai: one live AI card per turn (cardTemplateId, else the public AI markdown "
        "card); markdown: plain markdown messages, no card permission needed",
    )
    ai_card_template_id: str = Field(
        AI_MARKDOWN_TEMPLATE,
        min_length=1,
        description="The public AI markdown card used without cardTemplateId (the one DingTalk's "
        "own connector and channel SDKs use)",
    )
    lookup_sender_email: bool = Field(
        True,
        description="Look up the sender's email (topapi/v2/user/get, cached a day) for "
        "sys.user_email and principals; needs the app's contact permission",
    )
    action_token_ttl_seconds: int = Field(
        LINK_TTL_MAX_S,
        ge=60,
        le=LINK_TTL_MAX_S,
        description="How long a button link in a message works; at most 8 h, the least "
        "runtime.dedupTtlHours, so no link outlives the record of its click",
    )
    sign_window_seconds: int = Field(
        300,
        ge=10,
        le=3600,
        description="HTTP mode: how far a request's signed timestamp may be from now (DingTalk's "
        "doc allows up to 1 h); the sign covers the timestamp only, so a shorter window bounds "
        "how long an observed (timestamp, sign) pair can carry a forged body",
    )

    @model_validator(mode="after")
    def _one_reply_kind(self) -> DingTalkIntegration:
        if self.cards == "markdown" and self.card_template_id:
            raise ValueError("cards: markdown and cardTemplateId exclude each other")
        return self

    @property
    def card_template(self) -> str | None:
        """The AI card template a turn is shown in, or None for markdown messages."""
        if self.cards == "markdown":
            return None
        return self.card_template_id or self.ai_card_template_id

    @property
    def public_card(self) -> bool:
        """Whether the card is the public AI markdown card (its own keys, no buttons)."""
        return self.cards == "ai" and not self.card_template_id

    @field_validator("api_base")
    @classmethod
    def _https(cls, value: str) -> str:
        # The app secret travels to apiBase: plain http only for a local fake.
        url = urlparse(value)
        if url.scheme != "https" and not (url.scheme == "http" and _local(value)):
            raise ValueError("apiBase must be an https URL (plain http only for 127.0.0.1)")
        return value

    @property
    def robot(self) -> str:
        return self.robot_code or self.client_id

    @property
    def base(self) -> str:
        return self.api_base.rstrip("/")

    @property
    def oapi_base(self) -> str:
        """DingTalk's older API host (``/media/upload``, ``topapi/…`` the user look-up):
        oapi.dingtalk.com, or apiBase itself when that is a local fake, which serves both."""
        return self.base if _local(self.api_base) else SESSION_WEBHOOK_ORIGIN

    @property
    def webhook_origins(self) -> frozenset[str]:
        """The origins a sessionWebhook may be on: DingTalk's own, and apiBase's when apiBase is
        a local fake (tests, a local DingTalk stand-in)."""
        if _local(self.api_base):
            return frozenset({SESSION_WEBHOOK_ORIGIN, origin_of(self.api_base) or ""}) - {""}
        return frozenset({SESSION_WEBHOOK_ORIGIN})


# sessionWebhook is ``https://oapi.dingtalk.com/robot/sendBySession?session=…``: the doc
# (https://open.dingtalk.com/document/development/robot-message-type, "机器人接收消息") names the
# field only ("当前会话的Webhook地址"); every captured payload quoted in public code has this URL.
SESSION_WEBHOOK_ORIGIN = "https://oapi.dingtalk.com"


def _local(url: str) -> bool:
    return urlparse(url).hostname in LOCAL_HOSTS


def origin_of(url: str) -> str | None:
    """``scheme://host[:port]`` of an absolute http(s) URL without userinfo, else None."""
    try:
        parsed = URL(url)
    except (TypeError, ValueError):
        return None
    if (
        parsed.scheme not in ("http", "https")
        or not parsed.host
        or parsed.user is not None
        or parsed.password is not None
    ):
        return None
    try:
        return str(parsed.origin())
    except ValueError:
        return None
