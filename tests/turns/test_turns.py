"""The turns package: conversation ids, the card a Retry or a Confirm runs in, stale clicks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from gateway.config.bases import IntegrationBase
from gateway.conversation import ConversationId
from gateway.envelope import Chat, Envelope, ReplyTo, Sender
from sessions import KeyBuilder
from tests.support.configs import base_config
from tests.support.helpers import ConsoleClient
from tests.support.waits import eventually


def envelope(chat_type: str, thread: str | None = None) -> Envelope:
    return Envelope(
        integration_id="lark-main",
        platform="lark",
        event_id="e1",
        kind="message",
        chat=Chat(id="oc_1", type=chat_type, thread_id=thread),  # type: ignore[arg-type]
        sender=Sender(id="ou_alice"),
        text="hi",
        reply_to=ReplyTo(message_id="om_1"),
    )


@pytest.mark.parametrize(
    ("scope", "chat_type", "thread", "text"),
    [
        ("chat", "group", None, "lark-main|group:oc_1"),
        ("chat_sender", "group", None, "lark-main|group:oc_1:u:ou_alice"),
        ("thread", "group", "omt_9", "lark-main|group:oc_1:t:omt_9"),
        ("thread", "group", None, "lark-main|group:oc_1:t:om_1"),  # the message it replies to
        ("chat", "p2p", None, "lark-main|p2p:oc_1"),
    ],
)
def test_a_conversation_id_is_built_from_the_scope_and_parsed_back(
    scope: str, chat_type: str, thread: str | None, text: str
) -> None:
    integ = IntegrationBase.model_validate(
        {"id": "lark-main", "platform": "lark", "xpertId": "echo", "sessionScope": scope}
    )
    conversation = ConversationId.of(integ, envelope(chat_type, thread))
    assert str(conversation) == text
    assert ConversationId.parse(text) == conversation


def test_a_brace_in_a_chat_id_cannot_leave_the_redis_hash_tag() -> None:
    text = str(ConversationId("i", "group", "a}b{c"))  # percent-encoded (issue 25)
    assert "{" not in text and "}" not in text
    key = KeyBuilder().binding(text)
    assert key.count("{") == 1 and key.count("}") == 1
    assert ConversationId.parse("no bar here") is None


def slow(prefix: str) -> dict[str, Any]:
    cfg = base_config(prefix)
    cfg["experts"][0].update(charDelayMs=40, stepDelayMs=100)
    return cfg


async def test_stop_reaches_a_run_resumed_in_an_earlier_turns_card(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    """Regression: a Confirm runs in the interrupted turn's card, whose Stop carries that turn's
    id, which is not the id of the turn now running; the Stop was ignored."""
    console: ConsoleClient = await make_gateway(slow(prefix))
    await console.send("[confirm] " + "a long job " * 8)
    [card] = await console.wait_cards(status="waiting")
    await console.click("dm-alice", card["id"], "confirm")
    await console.wait_cards(status="running")
    assert await console.click("dm-alice", card["id"], "stop") == 202
    [card] = await console.wait_cards(status="cancelled")


async def test_confirm_keeps_what_the_card_showed_before_the_question(
    console: ConsoleClient,
) -> None:
    await console.send("[confirm] tidy up")
    [card] = await console.wait_cards(status="waiting")
    before = [s["title"] for s in card["card"]["steps"]]
    assert before
    await console.click("dm-alice", card["id"], "confirm")
    [card] = await console.wait_cards(status="done")
    after = [s["title"] for s in card["card"]["steps"]]
    assert after[: len(before)] == before


async def test_new_conversation_on_an_earlier_card_does_not_end_the_current_session(
    console: ConsoleClient, prefix: str, redis_client: aioredis.Redis
) -> None:
    key = KeyBuilder(prefix=prefix).binding("console|p2p:dm-alice")
    await console.send("first")
    [first] = await console.wait_cards()
    await console.send("second")
    cards = await console.wait_cards(count=2)
    session = await redis_client.hget(key, "sessionId")
    assert await console.click("dm-alice", first["id"], "new") == 202  # a stale card's button
    await eventually(lambda: _said(console, "no longer the current one"))
    await console.send("third")
    await console.wait_cards(count=3)
    assert await redis_client.hget(key, "sessionId") == session  # the session goes on
    assert await redis_client.hget(key, "turns") == "3"
    # the current card's button still ends it
    current = (await console.wait_cards(count=3))[-1]
    assert await console.click("dm-alice", current["id"], "new") == 202
    await eventually(lambda: _gone(redis_client, key))
    assert len(cards) == 2


async def _said(console: ConsoleClient, fragment: str) -> bool:
    return any(fragment in text for text in await console.texts())


async def _gone(client: aioredis.Redis, key: str) -> bool:
    return not await client.exists(key)


async def test_a_failed_turn_can_be_retried_again_from_the_same_card(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    from tests.fakes.experts import OPENAI_KEY, FakeOpenAI
    from tests.support.helpers import serve

    fake = FakeOpenAI(fail_with=[500, 500])
    async for url in serve(fake.app()):
        cfg = base_config(prefix, xpertId="gpt")
        cfg["experts"] = [
            {
                "id": "gpt",
                "kind": "openai",
                "baseUrl": url + "/v1",
                "apiKey": OPENAI_KEY,
                "model": "m",
                "retries": 0,
            }
        ]
        console = await make_gateway(cfg)
        await console.send("hello")
        [card] = await console.wait_cards(status="error")
        assert await console.click("dm-alice", card["id"], "retry") == 202
        await eventually(lambda: len(fake.requests) == 2)
        [card] = await console.wait_cards(status="error")  # fails once more
        assert await console.click("dm-alice", card["id"], "retry") == 202
        [card] = await console.wait_cards(status="done")
        assert card["card"]["answer"] == "Echo: hello"
