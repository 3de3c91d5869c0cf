"""Group watch end to end through the web console, a real gateway and Redis: a watched keyword
starts a turn without a mention, its card appears in the chat, the cooldown holds and ends,
matches merge, a redelivery makes one card, an addressed match is a normal message."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tests.support.admin import TOKEN, admin
from tests.support.configs import base_config
from tests.support.helpers import ConsoleClient
from tests.support.waits import eventually, no_new_card

INCIDENTS = {"id": "incidents", "match": {"keywords": ["P0"]}, "text": "Triage this."}


def config(prefix: str, cooldown: int = 300, **integration: Any) -> dict[str, Any]:
    cfg = base_config(prefix, watches=[{**INCIDENTS, "cooldownSeconds": cooldown}], **integration)
    cfg["admin"] = {"token": TOKEN}
    return cfg


async def test_a_watched_keyword_starts_a_turn_and_the_cooldown_holds(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    console: ConsoleClient = await make_gateway(config(prefix, cooldown=2))
    await console.send("lunch anyone?", chat="team", sender="bob")
    event_id = await console.send("P0: checkout is down", chat="team", sender="bob")
    fired = time.monotonic()
    [card] = await console.wait_cards(chat="team")
    assert card["replyTo"] == event_id
    assert card["card"]["answer"] == ("You said:\n> Triage this.\n> \n> Bob: P0: checkout is down")
    _, body = await admin(console, "GET", "/v1.0/audit/events")
    [record] = [r for r in body["result"] if r["event"] == "watch.fire"]
    assert (record["watch"], record["eventId"], record["sender"]) == ("incidents", event_id, "bob")
    # Within the cooldown: no new turn ...
    await console.send("P0 still down", chat="team", sender="alice")
    await no_new_card(console, 1)
    assert time.monotonic() - fired < 2, "the test machine was too slow to check the cooldown"
    # ... and once the admin API says it is over, the next match starts one.
    await eventually(lambda: cooldown_over(console, "team"), timeout=5)
    await console.send("P0 again", chat="team", sender="carol")
    cards = await console.wait_cards(chat="team", count=2)
    assert cards[1]["card"]["answer"].endswith("> Carol: P0 again")


async def cooldown_over(console: ConsoleClient, chat: str) -> bool:
    _, body = await admin(console, "GET", "/v1.0/integrations/console/watches", chatId=chat)
    return body["result"][0]["cooldown"] is None


async def test_matches_within_the_window_merge_into_one_turn(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway(config(prefix, summaryWindowSeconds=0.8, maxWindowSeconds=5))
    await console.send("P0: checkout is down", chat="team", sender="bob")
    await console.send("P0 here too", chat="team", sender="alice")
    [card] = await console.wait_cards(chat="team")
    assert card["card"]["answer"] == (
        "You said:\n> Triage this.\n> \n> Bob: P0: checkout is down\n> Alice: P0 here too"
    )
    await no_new_card(console, 1)


async def test_a_redelivered_match_makes_one_card(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway(config(prefix))
    for _ in range(3):
        await console.send("P0: checkout is down", chat="team", event_id="evt-p0-1")
    await console.wait_cards(chat="team")
    await no_new_card(console, 1)


async def test_an_addressed_match_is_answered_once_as_a_message(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway(config(prefix))
    await console.send("P0: what do we do?", chat="team", sender="bob", mention=True)
    [card] = await console.wait_cards(chat="team")
    assert card["card"]["answer"] == "You said:\n> P0: what do we do?"
    await no_new_card(console, 1)
    # the addressed message did not start the cooldown: an unaddressed match still fires
    await console.send("P0 unaddressed", chat="team", sender="bob")
    cards = await console.wait_cards(chat="team", count=2)
    assert cards[1]["card"]["answer"].endswith("> Bob: P0 unaddressed")


async def test_buttons_of_a_watch_card_act_on_its_conversation(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway(config(prefix))
    await console.send("P0: checkout is down", chat="team", sender="bob")
    [card] = await console.wait_cards(chat="team")
    assert await console.click("team", card["id"], "new", sender="bob") == 202
    await eventually(
        lambda: _texts_include(console, "team", "Started a new conversation"), timeout=5
    )


async def _texts_include(console: ConsoleClient, chat: str, fragment: str) -> bool:
    return any(fragment in t for t in await console.texts(chat))
