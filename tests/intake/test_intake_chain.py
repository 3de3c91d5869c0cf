"""The intake chain (gateway/intake/router.py): handlers are offered an envelope in the one order
registered in ``Pipeline``; what a chat command is (``/`` and an ASCII word, then a space or the
end), and an unknown one answered in the chat instead of going to the expert."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gateway.config.file import load_settings
from gateway.edge.ingest import IngestOutcome
from gateway.envelope import Chat, Envelope, Sender
from gateway.intake.commands import Command, parse_command
from gateway.intake.drops import FromBots, Unaddressed
from gateway.intake.router import Incoming, Router
from gateway.runtime.cli import settings_model
from tests.support.configs import base_config
from tests.support.helpers import ConsoleClient
from tests.support.waits import eventually

WATCH = {"id": "incidents", "match": {"keywords": ["P0"]}, "text": "Triage this."}


@pytest.mark.parametrize(
    ("text", "command"),
    [
        ("/help", Command("help")),
        ("  /HELP  ", Command("help")),
        ("/stop now", Command("stop")),
        ("/new tell me more", Command("new", "tell me more")),
        ("/new\nfirst line\nsecond", Command("new", "first line\nsecond")),
        ("/schedules", Command("schedules")),
        ("/unschedule 2", Command("unschedule", "2")),
        ("/frobnicate it", Command("frobnicate", "it")),
        ("/foo_bar2", Command("foo_bar2")),
        ("/ something", None),
        ("/usr/bin is slow", None),
        ("/123", None),
        ("/help@bot", None),
        ("/天气", None),
        ("hello /help", None),
        ("", None),
    ],
)
def test_what_a_command_is(text: str, command: Command | None) -> None:
    assert parse_command(text) == command


def test_known_and_unknown_commands() -> None:
    for name in ("new", "stop", "help", "remember", "memory", "forget"):
        assert Command(name).known
    for name in ("schedule", "schedules", "unschedule"):
        assert Command(name).known
    assert not Command("frobnicate").known


class _Handler:
    def __init__(self, name: str, seen: list[str], *, takes: bool, answers: bool) -> None:
        self.name, self.seen, self.takes, self.answers = name, seen, takes, answers

    def matches(self, incoming: Incoming) -> bool:
        self.seen.append(f"{self.name}?")
        return self.takes

    async def handle(self, incoming: Incoming) -> IngestOutcome | None:
        self.seen.append(self.name)
        return IngestOutcome("handled", self.name) if self.answers else None


def _incoming(text: str = "hi", *, bot: bool = False) -> Incoming:
    integ = load_settings(base_config("x"), model=settings_model()).integration("console")
    assert integ is not None
    env = Envelope(
        integration_id="console",
        platform="console",
        event_id="e1",
        chat=Chat(id="team", type="group"),
        sender=Sender(id="bob", is_bot=bot),
        text=text,
    )
    return Incoming(env, integ, "console|group:team")


async def test_the_router_offers_each_envelope_in_the_registered_order() -> None:
    seen: list[str] = []
    router = Router(
        _Handler("a", seen, takes=False, answers=True),
        _Handler("b", seen, takes=True, answers=False),  # matches, then "not mine, go on"
        _Handler("c", seen, takes=True, answers=True),
        _Handler("d", seen, takes=True, answers=True),  # never asked: c answered
    )
    assert await router.route(_incoming()) == IngestOutcome("handled", "c")
    assert seen == ["a?", "b?", "b", "c?", "c"]
    assert (await Router().route(_incoming())).status == "ignored"


async def test_the_drop_rules_come_first() -> None:
    seen: list[str] = []
    router = Router(FromBots(), _Handler("after", seen, takes=True, answers=True))
    assert await router.route(_incoming(bot=True)) == IngestOutcome("ignored", "sent by a bot")
    assert seen == []
    unaddressed = Unaddressed(records=None, clock=lambda: 0)  # type: ignore[arg-type]
    assert unaddressed.matches(_incoming("/help"))  # a group message without a mention


def _config(prefix: str) -> dict[str, Any]:
    return base_config(prefix, watches=[{**WATCH, "cooldownSeconds": 300}])


async def test_an_unknown_command_is_answered_in_the_chat_not_by_the_expert(
    console: ConsoleClient,
) -> None:
    await console.send("/frobnicate the widgets")
    await eventually(lambda: _has(console, "/frobnicate: unknown command, try /help"))
    await console.send("/schedules")  # a known one still works
    await eventually(lambda: _has(console, "No schedules in this chat"))
    await console.send("hello")  # the next turn is this message's alone
    [card] = await console.wait_cards()
    assert card["card"]["answer"] == "You said:\n> hello"


@pytest.mark.parametrize("text", ["/usr/bin is slow", "/ something"])
async def test_a_slash_that_is_no_command_goes_to_the_expert(
    console: ConsoleClient, text: str
) -> None:
    await console.send(text)
    [card] = await console.wait_cards()
    assert card["card"]["answer"] == f"You said:\n> {text}"
    assert not any("unknown command" in t for t in await console.texts())


async def _has(console: ConsoleClient, fragment: str, chat: str = "dm-alice") -> bool:
    return any(fragment in t for t in await console.texts(chat))


async def test_a_command_that_a_watch_also_matches_goes_where_the_order_says(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    console: ConsoleClient = await make_gateway(_config(prefix))
    # Unaddressed in the group: the watch comes before the commands, so it takes the message.
    await console.send("/stop P0: checkout is down", chat="team", sender="bob")
    [card] = await console.wait_cards(chat="team")
    assert card["card"]["answer"].endswith("> Bob: /stop P0: checkout is down")
    # Unaddressed and no watch takes it (cooling down): dropped as chatter, before the commands.
    await console.send("/help P0", chat="team", sender="bob")
    # Addressed: the command, at once (it never reaches the watches or the burst).
    await console.send("/help P0", chat="team", sender="carol", mention=True)
    await eventually(lambda: _has(console, "/new [text]", chat="team"))
    assert len([t for t in await console.texts("team") if "/new [text]" in t]) == 1
    assert len(await console.cards("team")) == 1
