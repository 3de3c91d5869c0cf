"""WeCom AI bot in callback mode end to end: encrypted JSON, a stream reply per message,
refresh callbacks answered with growing content until ``finish``, the 6-minute window."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis

from tests.fakes.wecom import FakeWeCom
from tests.support.helpers import InProcessGateway
from tests.support.waits import eventually
from tests.support.wecom import (
    AES_KEY,
    ECHO_SLOW,
    TOKEN,
    aibot_click,
    aibot_message,
    decrypt_reply,
    encrypt_json,
    post,
    start_gateway,
    url,
)


@pytest.fixture
async def env(
    prefix: str, redis_client: aioredis.Redis, fake: FakeWeCom
) -> AsyncIterator[dict[str, Any]]:
    started: list[InProcessGateway] = []
    async with aiohttp.ClientSession() as http:

        async def start(**kw: Any) -> InProcessGateway:
            gw = await start_gateway(prefix, fake, "aibot", **kw)
            started.append(gw)
            return gw

        yield {"start": start, "http": http}
    for gw in reversed(started):
        await gw.stop()


def text_message(msg_id: str, text: str, fake: FakeWeCom, **extra: Any) -> dict[str, Any]:
    response_url = fake.response_url(msg_id)
    return aibot_message(msg_id, "text", {"content": text}, response_url=response_url, **extra)


async def send(env: dict[str, Any], gw: InProcessGateway, message: dict[str, Any]) -> Any:
    query, body = encrypt_json(message)
    status, text = await post(env["http"], url(gw), query, body)
    assert status == 200, text
    return decrypt_reply(text) if text else None


async def poll(env: dict[str, Any], gw: InProcessGateway, stream_id: str) -> dict[str, Any]:
    reply = await send(
        env,
        gw,
        {
            "msgid": "poll",
            "msgtype": "stream",
            "stream": {"id": stream_id},
            "from": {"userid": "alice"},
        },
    )
    assert reply["msgtype"] == "stream"
    stream: dict[str, Any] = reply["stream"]
    return stream


async def test_url_verification_uses_the_empty_receive_id(env: dict[str, Any]) -> None:
    import base64

    from wechatpy.crypto import PrpCrypto, _get_signature

    gw = await env["start"]()
    echo = PrpCrypto(base64.b64decode(AES_KEY + "=")).encrypt("4242", "").decode()
    query = {"timestamp": "1700000000", "nonce": "n", "echostr": echo}
    query["msg_signature"] = _get_signature(TOKEN, query["timestamp"], "n", echo)
    gw.gateway.adapters["wc"].clock = lambda: 1700000000.0  # type: ignore[attr-defined]
    async with env["http"].get(url(gw), params=query) as resp:
        assert (resp.status, await resp.text()) == (200, "4242")


async def test_stream_refreshes_grow_until_finish(env: dict[str, Any], fake: FakeWeCom) -> None:
    gw = await env["start"](expert=ECHO_SLOW)
    first = await send(env, gw, text_message("m-1", "hello stream", fake))
    assert first["msgtype"] == "stream" and first["stream"]["finish"] is False
    stream_id = first["stream"]["id"]
    seen: list[dict[str, Any]] = []

    async def finished() -> bool:
        seen.append(await poll(env, gw, stream_id))
        return bool(seen[-1]["finish"])

    await eventually(finished, timeout=15, interval=0.1)
    contents = [s["content"] for s in seen]
    assert contents[-1].endswith("You said:\n> hello stream")
    assert "**Working on it…**" in contents[0] or contents[0] == "⏳"
    answers = [c.split("\n\n", 1)[-1] for c in contents if "You said" in c]
    assert len(answers) >= 2 and all(b.startswith(a[:10]) for a, b in itertools.pairwise(answers))
    assert all(len(a) <= len(b) for a, b in itertools.pairwise(answers))
    # A retried message keeps its stream and makes no second turn.
    again = await send(env, gw, text_message("m-1", "hello stream", fake))
    assert again["stream"] == {"id": stream_id, "finish": True, "content": contents[-1]}


async def test_group_mention_is_stripped_and_mixed_content_read(
    env: dict[str, Any], fake: FakeWeCom
) -> None:
    gw = await env["start"]()
    items = [
        {"msgtype": "text", "text": {"content": "@bot look at this"}},
        {"msgtype": "image", "image": {"url": "https://img.example/1"}},
    ]
    message = aibot_message(
        "m-2",
        "mixed",
        {"msg_item": items},
        chattype="group",
        chatid="grp-1",
        response_url=fake.response_url("m-2"),
    )
    stream_id = (await send(env, gw, message))["stream"]["id"]

    async def done() -> Any:
        s = await poll(env, gw, stream_id)
        return s["finish"] and s["content"]

    assert (await eventually(done)).endswith("You said:\n> look at this")


async def test_a_turn_that_outlives_the_window_ends_its_stream_and_answers_later(
    env: dict[str, Any], fake: FakeWeCom
) -> None:
    gw = await env["start"](expert=ECHO_SLOW, streamWindowSeconds=1)
    stream_id = (await send(env, gw, text_message("m-3", "slow one", fake)))["stream"]["id"]
    await asyncio.sleep(1.1)  # past the (shortened) stream window: the time itself is the subject
    cut = await poll(env, gw, stream_id)
    assert cut["finish"] is True and "new message" in cut["content"]
    [late] = await eventually(lambda: fake.responses, timeout=15)
    assert late["id"] == "m-3" and late["msgtype"] == "markdown"
    assert late["markdown"]["content"] == "You said:\n> slow one"
    # Regression: the turn ends (it hung when the renderer's cancel landed inside a Redis call).
    await eventually(lambda: not gw.gateway.runner.active, timeout=3)


async def test_command_answers_on_its_stream(env: dict[str, Any], fake: FakeWeCom) -> None:
    gw = await env["start"]()
    stream_id = (await send(env, gw, text_message("m-4", "/help", fake)))["stream"]["id"]

    async def done() -> Any:
        s = await poll(env, gw, stream_id)
        return s["finish"] and s["content"]

    assert "/new" in await eventually(done)


async def test_bad_signature_is_refused(env: dict[str, Any], fake: FakeWeCom) -> None:
    gw = await env["start"]()
    query, body = encrypt_json(text_message("m-5", "x", fake))
    query["msg_signature"] = "0" * 40
    assert (await post(env["http"], url(gw), query, body))[0] == 401
    query, body = encrypt_json(text_message("m-5", "x", fake), receive_id="wwcorp")
    assert (await post(env["http"], url(gw), query, body))[0] == 400
    assert (await post(env["http"], url(gw), query, "{not json"))[0] == 400


async def test_card_click_becomes_an_action_and_is_answered_with_a_card_update(
    env: dict[str, Any], fake: FakeWeCom
) -> None:
    gw = await env["start"](expert=ECHO_SLOW)
    stream_id = (await send(env, gw, text_message("m-6", "long task", fake)))["stream"]["id"]
    runs = await eventually(lambda: list(gw.gateway.runner.active.values()))
    value = {"conversation": runs[0].conversation, "turnId": runs[0].turn_id, "action": "stop"}
    click = aibot_click("ev-6", json.dumps(value), "task-6")
    reply = await send(env, gw, click)
    assert reply["response_type"] == "update_template_card"
    assert reply["userids"] == ["alice"]
    card = reply["template_card"]
    assert card["task_id"] == "task-6" and card["main_title"]["title"] == "Stop requested"
    assert json.loads(card["button_list"][0]["key"]) == value

    async def done() -> Any:
        s = await poll(env, gw, stream_id)
        return s["finish"] and s["content"]

    # The click stopped the turn: its stream ends without the echo's full answer.
    assert "You said:\n> long task" not in await eventually(done, timeout=10)


async def test_enter_chat_is_answered_with_a_welcome(env: dict[str, Any], fake: FakeWeCom) -> None:
    gw = await env["start"]()
    event = {
        "msgid": "ev-7",
        "aibotid": "aib-1",
        "chattype": "single",
        "from": {"userid": "bob"},
        "msgtype": "event",
        "event": {"eventtype": "enter_chat"},
    }
    reply = await send(env, gw, event)
    assert reply["msgtype"] == "text" and "/help" in reply["text"]["content"]
