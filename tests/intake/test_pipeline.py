"""End-to-end through the console API with a real Redis: intake, merge window, sessions,
busy policies, commands, interrupts, Stop and New (docs/architecture.md, invariants 1-4); each on
the shared Redis and on a Redis Cluster."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from sessions import KeyBuilder
from tests.support.configs import base_config
from tests.support.helpers import ConsoleClient
from tests.support.redis_targets import BOTH_REDIS
from tests.support.waits import eventually

pytestmark = BOTH_REDIS

SLOW_ECHO = {"id": "echo", "kind": "echo", "stepDelayMs": 150, "charDelayMs": 20, "chunkChars": 2}


def slow_config(prefix: str, **integration: Any) -> dict[str, Any]:
    config = base_config(prefix, **integration)
    config["experts"] = [SLOW_ECHO]
    return config


async def test_message_gets_one_card_that_streams_to_done(console: ConsoleClient) -> None:
    event_id = await console.send("hello world")
    [card] = await console.wait_cards()
    assert card["replyTo"] == event_id
    assert card["card"]["answer"] == "You said:\n> hello world"
    assert [s["status"] for s in card["card"]["steps"]] == ["done"] * 3
    assert [b["actionId"] for b in card["card"]["buttons"]] == ["new"]


async def test_message_is_durable_before_202(
    console: ConsoleClient,
    redis_client: aioredis.Redis,
    make_gateway: Callable[..., Any],
    prefix: str,
) -> None:
    # A gateway that takes messages but never runs turns: the burst itself must be in Redis.
    config = base_config(prefix, summaryWindowSeconds=30, maxWindowSeconds=30)
    idle = await make_gateway(config)
    event_id = await idle.send("keep me", chat="dm-bob", sender="bob")
    keys = KeyBuilder(prefix=prefix)
    burst = await redis_client.lrange(keys.burst("console|p2p:dm-bob"), 0, -1)
    assert len(burst) == 1 and event_id in burst[0] and "keep me" in burst[0]


async def test_redelivered_event_makes_no_second_turn(console: ConsoleClient) -> None:
    await console.send("once", event_id="evt-dup-1")
    await console.send("once", event_id="evt-dup-1")
    await console.wait_cards()
    await console.send("twice", event_id="evt-dup-1")
    await console.idle()
    assert len(await console.cards()) == 1
    assert len([m for m in await console.messages() if m["role"] == "user"]) == 1


async def test_quick_messages_within_the_window_become_one_turn(
    make_gateway: Callable[..., Any],
) -> None:
    console = await make_gateway(summaryWindowSeconds=0.6)
    started = time.monotonic()
    await console.send("first part")
    await console.send("second part")
    [card] = await console.wait_cards()
    assert card["card"]["answer"] == "You said:\n> first part\n> second part"
    assert time.monotonic() - started >= 0.55
    await console.send("later")  # after the window: its own turn
    cards = await console.wait_cards(count=2)
    assert cards[1]["card"]["answer"].endswith("> later")


async def test_max_window_caps_a_steady_stream(make_gateway: Callable[..., Any]) -> None:
    console = await make_gateway(summaryWindowSeconds=0.5, maxWindowSeconds=1.0)
    for i in range(8):  # one message every 0.2 s keeps resetting the 0.5 s debounce
        await console.send(f"m{i}")
        await asyncio.sleep(0.2)  # the pacing is the input under test
    cards = await console.wait_cards(count=2)
    first = cards[0]["card"]["answer"]
    assert "> m0" in first and "> m7" not in first  # dispatched by the 1 s cap, not the silence


async def test_group_mentions_and_speakers(make_gateway: Callable[..., Any]) -> None:
    console = await make_gateway(summaryWindowSeconds=0.4)
    await console.send("chatter, not for the bot", chat="team", sender="bob")
    await console.send("what is the plan?", chat="team", sender="alice", mention=True)
    await console.send("and the budget?", chat="team", sender="bob", mention=True)
    [card] = await console.wait_cards(chat="team")
    assert card["card"]["answer"] == (
        "You said:\n> Alice: what is the plan?\n> Bob: and the budget?"
    )


async def test_all_messages_strategy_answers_without_mention(
    make_gateway: Callable[..., Any],
) -> None:
    console = await make_gateway(groupReplyStrategy="all_messages")
    await console.send("no mention needed", chat="team")
    [card] = await console.wait_cards(chat="team")
    assert card["card"]["answer"].endswith("> no mention needed")


async def test_message_during_a_run_is_collected_into_the_next_turn_in_order(
    make_gateway: Callable[..., Any],
    prefix: str,
) -> None:
    console = await make_gateway(slow_config(prefix))
    await console.send("one")
    await console.wait_cards(status="running")
    await console.send("two")
    await console.send("three")
    cards = await console.wait_cards(count=2, timeout=20)
    assert cards[0]["card"]["answer"].endswith("> one")
    assert cards[1]["card"]["answer"].endswith("> two\n> three")


async def test_reject_policy_says_busy(make_gateway: Callable[..., Any], prefix: str) -> None:
    console = await make_gateway(slow_config(prefix, busyPolicy="reject"))
    await console.send("one")
    await console.wait_cards(status="running")
    await console.send("two")
    await eventually(lambda: _has_text(console, "still working"))
    cards = await console.wait_cards(count=1, timeout=20)
    await console.idle()
    assert len(await console.cards()) == 1 and cards[0]["card"]["answer"].endswith("> one")


async def _has_text(console: ConsoleClient, fragment: str, chat: str = "dm-alice") -> bool:
    return any(fragment.lower() in t.lower() for t in await console.texts(chat))


async def test_stop_button_cancels_the_run(make_gateway: Callable[..., Any], prefix: str) -> None:
    console = await make_gateway(slow_config(prefix))
    await console.send("a long question " * 5)
    [card] = await console.wait_cards(status="running")
    assert await console.click("dm-alice", card["id"], "stop") == 202
    [card] = await console.wait_cards(status="cancelled")
    assert [b["actionId"] for b in card["card"]["buttons"]] == ["new"]
    assert all(s["status"] != "running" for s in card["card"]["steps"])


async def test_stop_and_help_commands(make_gateway: Callable[..., Any], prefix: str) -> None:
    console = await make_gateway(slow_config(prefix))
    await console.send("/stop")
    await eventually(lambda: _has_text(console, "nothing is running"))
    await console.send("/help")
    await eventually(lambda: _has_text(console, "/new [text]"))
    await console.send("please run " * 5)
    await console.wait_cards(status="running")
    await console.send("/stop")
    await console.wait_cards(status="cancelled")


async def test_new_command_and_button_open_a_new_session(
    make_gateway: Callable[..., Any],
    prefix: str,
    redis_client: aioredis.Redis,
) -> None:
    console = await make_gateway()
    keys = KeyBuilder(prefix=prefix)
    binding_key = keys.binding("console|p2p:dm-alice")
    await console.send("hello")
    [card] = await console.wait_cards()
    first = await redis_client.hget(binding_key, "sessionId")
    assert first
    assert await console.click("dm-alice", card["id"], "new") == 202
    await eventually(lambda: _has_text(console, "new conversation"))
    assert not await redis_client.exists(binding_key)
    await console.send("/new start over please")
    cards = await console.wait_cards(count=2)
    assert cards[1]["card"]["answer"].endswith("> start over please")
    second = await redis_client.hget(binding_key, "sessionId")
    assert second and second != first


async def test_idle_timeout_opens_a_new_session(
    make_gateway: Callable[..., Any],
    prefix: str,
    redis_client: aioredis.Redis,
) -> None:
    console = await make_gateway(sessionTimeoutSeconds=1)
    key = KeyBuilder(prefix=prefix).binding("console|p2p:dm-alice")
    await console.send("first")
    await console.wait_cards()
    first = await redis_client.hget(key, "sessionId")
    await console.send("second, quickly")
    await console.wait_cards(count=2)
    assert await redis_client.hget(key, "sessionId") == first
    assert await redis_client.hget(key, "turns") == "2"
    await asyncio.sleep(1.2)  # the session's real idle timeout is what is under test
    await console.send("after the timeout")
    await console.wait_cards(count=3)
    third = await redis_client.hget(key, "sessionId")
    assert third and third != first


async def test_confirm_resumes_the_interrupted_run_in_the_same_card(
    console: ConsoleClient,
) -> None:
    await console.send("delete the old files [confirm]")
    [card] = await console.wait_cards(status="waiting")
    assert [b["actionId"] for b in card["card"]["buttons"]] == ["confirm", "reject"]
    assert await console.click("dm-alice", card["id"], "confirm") == 202
    [card] = await console.wait_cards(status="done")
    assert card["card"]["answer"].startswith("Confirmed. You said:")
    # A second click on the (now finished) card is refused: it no longer offers the button.
    assert await console.click("dm-alice", card["id"], "confirm") == 400


async def test_reject_ends_the_interrupted_run(console: ConsoleClient) -> None:
    await console.send("[confirm] wipe everything")
    [card] = await console.wait_cards(status="waiting")
    await console.click("dm-alice", card["id"], "reject")
    [card] = await console.wait_cards(status="rejected")  # not a green "Done"
    assert card["card"]["answer"] == "Rejected: nothing was done."
