"""The Mini integration's options."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, SecretStr

from gateway.config.bases import IntegrationBase, PlatformLimits


class MiniIntegration(IntegrationBase):
    """A bot on the Mini platform (tests/platforms/mini)."""

    platform: Literal["mini"]
    platform_aliases: ClassVar[tuple[str, ...]] = ("minichat",)
    # Mini's published figures (its fake enforces the same: tests/platforms/mini/fake.py): 20
    # calls a second to each API, 5 new messages a second to one chat (MiniApi.chat_endpoints).
    published_limits: ClassVar[PlatformLimits | None] = PlatformLimits(
        calls_per_second=20, chat_sends_per_second=5
    )
    api_base: str = Field(description="The Mini API's origin")
    bot_token: SecretStr = Field(description="The bot's API token")
    signing_secret: SecretStr = Field(description="The secret webhook events are signed with")
    answers: Literal["cards", "texts"] = Field(
        "cards",
        description="cards: a card updated in place as the turn goes, with buttons; texts: "
        "plain messages, sent once the answer is final (no buttons: options are typed)",
    )
    timestamp_tolerance_seconds: int = Field(
        300, ge=1, le=3600, description="Events whose timestamp is further off are refused"
    )
