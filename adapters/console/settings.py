"""Console integration options: the bot's name and the demo users and chats the page offers."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from gateway.config.bases import IntegrationBase, PlatformLimits
from gateway.config.model import GatewayModel


class DemoUser(GatewayModel):
    id: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    name: str


class DemoChat(GatewayModel):
    id: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    name: str
    type: Literal["p2p", "group"]
    user_id: str | None = Field(None, description="For a direct chat: whose chat with the bot")


def _users() -> list[DemoUser]:
    return [
        DemoUser(id="alice", name="Alice"),
        DemoUser(id="bob", name="Bob"),
        DemoUser(id="carol", name="Carol"),
    ]


class ConsoleIntegration(IntegrationBase):
    """The local web console at ``/console/``."""

    platform: Literal["console"]
    # The console calls no platform: nothing to pace.
    published_limits: ClassVar[PlatformLimits | None] = PlatformLimits(enabled=False)
    bot_name: str = "Xpert"
    users: list[DemoUser] = Field(default_factory=_users)
    group_chats: list[DemoChat] = Field(
        default_factory=lambda: [DemoChat(id="team", name="Team chat", type="group")],
        description="Group chats offered by the page; direct chats are added per user",
    )

    @model_validator(mode="after")
    def _chats_are_groups(self) -> ConsoleIntegration:
        if any(c.type != "group" for c in self.group_chats):
            raise ValueError("groupChats may only list chats of type group")
        return self

    def chats(self) -> list[DemoChat]:
        direct = [
            DemoChat(id=f"dm-{u.id}", name=f"{u.name} ↔ {self.bot_name}", type="p2p", user_id=u.id)
            for u in self.users
        ]
        return [*self.group_chats, *direct]
