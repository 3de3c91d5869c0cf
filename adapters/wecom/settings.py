"""WeCom (企业微信) integration options: a self-built app (XML callbacks, template cards) or an
AI bot (智能机器人) over JSON callbacks or the long connection (docs/wecom.md)."""

from __future__ import annotations

import base64
import binascii
from typing import ClassVar, Literal

from pydantic import Field, SecretStr, model_validator

from gateway.config.bases import IntegrationBase, PlatformLimits


class WeComIntegration(IntegrationBase):
    """One WeCom app or AI bot."""

    platform: Literal["wecom"]
    # `check` says "did you mean" for these (WeCom's other names (WeChat Work, 企业微信)).
    platform_aliases: ClassVar[tuple[str, ...]] = ("wework", "wxwork", "workwx", "qywx", "企业微信")
    # The defaults of platformLimits (docs/wecom.md, "Limits"): 10,000/min and 150,000/h per
    # company per API; app messages 30/min and 1,000/h to one member, the excess silently
    # dropped (访问频率限制.md l.15-22). The APIs that send to a chat: WeComApi.chat_endpoints.
    published_limits: ClassVar[PlatformLimits | None] = PlatformLimits(
        calls_per_minute=10_000,
        calls_per_hour=150_000,
        chat_sends_per_minute=30,
        chat_sends_per_hour=1000,
    )
    connection_mode: Literal["app", "aibot", "aibot_ws"] = Field(
        "app",
        description="app: self-built app callbacks; aibot: AI bot JSON callbacks with stream "
        "replies; aibot_ws: AI bot long connection",
    )
    corp_id: str = Field("", description="CorpID; the receive-id of app callbacks")
    agent_id: int | None = Field(None, description="AgentID of the self-built app")
    corp_secret: SecretStr | None = Field(None, description="The app's Secret (gettoken)")
    token: SecretStr | None = Field(None, description="Callback Token (signatures)")
    encoding_aes_key: SecretStr | None = Field(
        None, description="Callback EncodingAESKey (43 characters)"
    )
    lookup_sender_email: bool = Field(
        True,
        description="app: look up the sender's email (user/get, cached a day) for sys.user_email",
    )
    bot_id: str = Field("", description="AI bot id (aibot_ws)")
    bot_secret: SecretStr | None = Field(None, description="AI bot long-connection secret")
    api_base: str = "https://qyapi.weixin.qq.com"
    ws_url: str = "wss://openws.work.weixin.qq.com"
    signature_window_seconds: int = Field(
        600, ge=10, description="Callbacks whose timestamp is further off are refused"
    )
    stream_window_seconds: float = Field(
        330,
        ge=1,
        le=360,
        description="AI bot: a stream still open this long after the message is closed with a "
        "note and the rest sent as a new message (WeCom stops polling at 6 minutes)",
    )
    ping_interval_seconds: float = Field(30, gt=0, description="aibot_ws application ping")
    displaced_retry_seconds: float = Field(
        300,
        ge=1,
        le=86_400,
        description="aibot_ws: after WeCom gave the bot's connection to a client that is not "
        "one of our replicas (disconnected_event), no replica connects for this long",
    )

    @model_validator(mode="after")
    def _mode_fields(self) -> WeComIntegration:
        key = self.encoding_aes_key.get_secret_value() if self.encoding_aes_key else ""
        if self.connection_mode in ("app", "aibot"):
            if self.token is None or not key:
                raise ValueError(
                    f"connectionMode {self.connection_mode} needs token and encodingAesKey"
                )
            if len(key) != 43:
                raise ValueError(
                    f"encodingAesKey: must be 43 characters (the EncodingAESKey of the app's "
                    f"callback settings); this one has {len(key)}"
                )
            if len(_b64(key + "=")) != 32:
                raise ValueError(
                    "encodingAesKey: must be 43 base64 characters (A-Z, a-z, 0-9, + and /); "
                    "this one has others"
                )
        if self.connection_mode == "app" and (
            not self.corp_id or self.agent_id is None or self.corp_secret is None
        ):
            raise ValueError("connectionMode app needs corpId, agentId and corpSecret")
        if self.connection_mode == "aibot_ws" and (not self.bot_id or self.bot_secret is None):
            raise ValueError("connectionMode aibot_ws needs botId and botSecret")
        return self


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        return b""
