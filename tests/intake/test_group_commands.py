"""Chat commands in a group (README "Using the console"): where the bot answers only mentions
(``groupReplyStrategy: mention_only``, the default) a command needs the @mention as any message
does, and without it is group chatter the bot leaves alone (another bot in the group may own the
same command); with ``all_messages`` a command is answered unmentioned. Through the console's
HTTP API against a real daemon and Redis."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.support.configs import base_config
from tests.support.waits import eventually


async def help_answers(console: Any) -> int:
    return sum("/new [text]" in text for text in await console.texts("team"))


async def test_a_group_command_needs_the_mention_where_the_bot_answers_only_mentions(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway(base_config(prefix, groupReplyStrategy="mention_only"))
    await console.send("/help", chat="team", mention=False)
    await console.idle()
    assert await help_answers(console) == 0
    assert await console.cards("team") == []
    await console.send("/help", chat="team", mention=True)
    await eventually(lambda: help_answers(console))
    assert await help_answers(console) == 1


async def test_with_all_messages_a_group_command_is_answered_unmentioned(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway(base_config(prefix, groupReplyStrategy="all_messages"))
    await console.send("/help", chat="team", mention=False)
    await eventually(lambda: help_answers(console))
