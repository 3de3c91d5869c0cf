"""A route: a per-chat rule of an integration (a chat, a chat pattern, a chat type or a sender)
and how it is matched; the first route that holds wins. What it gives the session that it opens
is ``gateway.policy.bundles``."""

from __future__ import annotations

from collections.abc import Collection
from fnmatch import fnmatchcase
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from gateway.config.limits import Limits
from gateway.config.model import GatewayModel
from gateway.envelope import Envelope

VARIABLE_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"


class Route(GatewayModel):
    """A per-chat rule, an access bundle: the first matching route wins, else the integration's
    own xpertId and limits. Every matcher given must hold."""

    chat_id: str | None = None
    chat_pattern: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="A glob on the chat id: * any text, ? one character, [..] a set (oc_team_*)",
    )
    chat_type: Literal["p2p", "group"] | None = None
    sender_id: str | None = None
    xpert_id: str | None = Field(None, description="The expert; default: the integration's")
    model: str | None = Field(
        None, min_length=1, description="The expert's model, for kinds that take one (openai)"
    )
    tools: list[Annotated[str, Field(min_length=1)]] | None = Field(
        None, description="Tool allow-list, for kinds that can restrict tools (see the docs)"
    )
    variables: dict[Annotated[str, Field(pattern=VARIABLE_NAME)], Any] = Field(
        default_factory=dict,
        description="Conversation variables a session of this route starts with",
    )
    limits: Limits | None = Field(None, description="Overrides the integration's limits")
    approvers: list[str] | None = Field(
        None,
        description="Sender ids who may answer Confirm / Reject of another's turn in this route's "
        "chats; default: the integration's approvers",
    )

    @model_validator(mode="after")
    def _has_matcher(self) -> Route:
        matchers = (self.chat_id, self.chat_pattern, self.chat_type, self.sender_id)
        if all(m is None for m in matchers):
            raise ValueError(
                "a route needs at least one of chatId, chatPattern, chatType, senderId"
            )
        return self

    def matches(self, chat_id: str, chat_type: str | None, sender_id: str | None) -> bool:
        """Whether the route holds for this chat and sender (``None``: not known, which only a
        route that asks about it refuses)."""
        if self.chat_id is not None and self.chat_id != chat_id:
            return False
        if self.chat_pattern is not None and not fnmatchcase(chat_id, self.chat_pattern):
            return False
        if self.chat_type is not None and self.chat_type != chat_type:
            return False
        return self.sender_id is None or self.sender_id == sender_id

    def describe(self) -> str:
        """The matchers, for ``check`` and logs."""
        return ", ".join(
            f"{k}={v}"
            for k, v in (
                ("chatId", self.chat_id),
                ("chatPattern", self.chat_pattern),
                ("chatType", self.chat_type),
                ("senderId", self.sender_id),
            )
            if v is not None
        )


def match_route(
    routes: list[Route], chat_id: str, chat_type: str | None, sender_id: str | None
) -> tuple[int, Route] | None:
    """The first route that holds, with its index."""
    for i, route in enumerate(routes):
        if route.matches(chat_id, chat_type, sender_id):
            return i, route
    return None


def route_of(routes: list[Route], envelope: Envelope) -> tuple[int, Route] | None:
    return match_route(routes, envelope.chat.id, envelope.chat.type, envelope.sender.id)


def bundle_problems(path: str, routes: list[Route], experts: Collection[str]) -> list[str]:
    """Errors: a route naming no expert (and the experts there are)."""
    known = ", ".join(sorted(experts))
    return [
        f"{path}.routes.{j}.xpertId: {route.xpert_id!r} names no expert (experts: {known})"
        for j, route in enumerate(routes)
        if route.xpert_id is not None and route.xpert_id not in experts
    ]
