"""Lark long connection: lark-oapi's WebSocket client against the fake server's protobuf frames;
events are acked only after durable intake, callbacks answer with their toast (issue 3)."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis

from adapters.lark.connection import _Bridge
from gateway.config.file import load_settings
from gateway.runtime.cli import settings_model
from tests.fakes.lark import FakeLark
from tests.support.helpers import InProcessGateway
from tests.support.lark import INTEGRATION, card_click, lark_config, message_event
from tests.support.waits import eventually


@pytest.fixture
async def gateway(
    fake: FakeLark, prefix: str, redis_client: aioredis.Redis
) -> AsyncIterator[InProcessGateway]:
    config = lark_config(
        prefix, fake, connectionMode="long_connection", verificationToken=None, encryptKey=None
    )
    gw = InProcessGateway(config)
    await gw.start()
    yield gw
    await gw.stop()


async def readyz(gw: InProcessGateway) -> dict[str, Any]:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{gw.port}/readyz") as resp:
            body: dict[str, Any] = await resp.json()
            return body


async def test_event_over_the_long_connection_is_acked_after_intake_and_answered(
    gateway: InProcessGateway, fake: FakeLark, redis_client: aioredis.Redis, prefix: str
) -> None:
    await eventually(lambda: fake.sockets)
    state = await eventually(readyz_connected(gateway))
    assert state["checks"][INTEGRATION]["connection"] == "connected"
    frame = await fake.push(message_event("over the socket", message_id="om_ws1"))
    ack = await fake.wait_ack(frame)
    assert ack["code"] == 200
    # Acked means stored: the message's dedup record exists in Redis.
    dedup = [k async for k in redis_client.scan_iter(match=f"{prefix}:*dedup*om_ws1")]
    assert dedup

    def done() -> Any:
        replies = [m for m in fake.messages.values() if m["parent_id"] == "om_ws1"]
        return (
            replies
            and fake.card_of(replies[0]["message_id"])["header"]["title"]["content"] == "Done"
        )

    await eventually(done)
    again = await fake.push(message_event("over the socket", message_id="om_ws1"))
    assert (await fake.wait_ack(again))["code"] == 200
    assert len([m for m in fake.messages.values() if m["parent_id"] == "om_ws1"]) == 1


async def test_callback_over_the_long_connection_answers_with_a_toast(
    gateway: InProcessGateway, fake: FakeLark
) -> None:
    await eventually(lambda: fake.sockets)
    value = {"conversation": f"{INTEGRATION}|p2p:oc_p2p1", "turnId": "t1", "action": "stop"}
    frame = await fake.push(card_click(value, message_id="om_card"))
    ack = await fake.wait_ack(frame)
    assert ack["code"] == 200
    answer = json.loads(base64.b64decode(ack["data"]))
    assert answer["toast"]["content"] == "Stopping…"
    assert "card" not in answer  # no card of ours on record under that message id


async def test_click_over_the_long_connection_answers_with_the_updated_card(
    gateway: InProcessGateway, fake: FakeLark
) -> None:
    await eventually(lambda: fake.sockets)
    await fake.wait_ack(await fake.push(message_event("card please", message_id="om_ws3")))

    def done_card() -> Any:
        replies = [m["message_id"] for m in fake.messages.values() if m["parent_id"] == "om_ws3"]
        card = fake.card_of(replies[0]) if replies else None
        return (replies[0], card) if card and card["header"]["title"]["content"] == "Done" else None

    card_id, card = await eventually(done_card)
    [button] = [e for e in card["body"]["elements"] if e["tag"] == "button"]
    frame = await fake.push(card_click(button["behaviors"][0]["value"], message_id=card_id))
    ack = await fake.wait_ack(frame)
    assert ack["code"] == 200
    answer = json.loads(base64.b64decode(ack["data"]))
    assert answer["card"]["type"] == "raw"
    assert not [e for e in answer["card"]["data"]["body"]["elements"] if e["tag"] == "button"]
    fake.apply_callback(card_id, answer)


async def test_no_ack_success_when_intake_refuses(
    gateway: InProcessGateway, fake: FakeLark
) -> None:
    await eventually(lambda: fake.sockets)
    gateway.gateway.pipeline.accepting = False  # as during shutdown: intake refuses
    frame = await fake.push(message_event("too late", message_id="om_ws2"))
    ack = await fake.wait_ack(frame)
    assert ack["code"] == 500  # Lark re-pushes it to another client
    gateway.gateway.pipeline.accepting = True


def readyz_connected(gw: InProcessGateway) -> Any:
    async def check() -> Any:
        body = await readyz(gw)
        return body if body["checks"][INTEGRATION].get("connection") == "connected" else None

    return check


async def test_a_reload_that_changes_the_integration_replaces_its_connection(
    gateway: InProcessGateway, fake: FakeLark, prefix: str
) -> None:
    """pitfalls #13: the old long connection is closed when its integration changes on reload,
    so events arrive over the new one only and are answered once."""
    await eventually(lambda: len(fake.sockets) == 1)
    old = fake.sockets[0]
    config = lark_config(
        prefix,
        fake,
        connectionMode="long_connection",
        verificationToken=None,
        encryptKey=None,
        summaryWindowSeconds=0.2,  # a changed option: the adapter is rebuilt
    )
    await gateway.gateway.reload(load_settings(config, model=settings_model()))
    await eventually(lambda: old.closed and len(fake.sockets) == 1 and fake.sockets[0] is not old)
    frame = await fake.push(message_event("after the reload", message_id="om_rl1"))
    assert (await fake.wait_ack(frame))["code"] == 200

    def replies() -> list[Any]:
        return [m for m in fake.messages.values() if m["parent_id"] == "om_rl1"]

    await eventually(replies)
    await eventually(lambda: not gateway.gateway.runner.active)
    assert len(replies()) == 1 and len(fake.sockets) == 1


def test_the_bridge_answers_to_the_method_the_installed_sdk_calls() -> None:
    """lark-oapi's ws client calls ``do_without_validation`` up to 1.5.x and
    ``_do_without_validation`` from 1.6.0 on (read in the 1.4.0-1.7.5 wheels): whichever the
    installed SDK calls, the bridge has it."""
    import inspect
    import re

    import lark_oapi.ws.client as ws_client

    source = inspect.getsource(ws_client.Client._handle_data_frame)
    [called] = re.findall(r"self\._event_handler\.(\w+)\(", source)
    assert callable(getattr(_Bridge, called))
    assert callable(_Bridge.do_without_validation) and callable(_Bridge._do_without_validation)


async def test_the_pre_1_6_method_name_ingests_and_answers_like_the_new_one(
    gateway: InProcessGateway, fake: FakeLark, redis_client: aioredis.Redis, prefix: str
) -> None:
    """The SDK calls the handler from its own thread and loop; so does this test, by the name
    lark-oapi 1.4.x-1.5.x uses."""
    await eventually(readyz_connected(gateway))
    bridge = _Bridge(gateway.gateway.adapters[INTEGRATION].connection)  # type: ignore[attr-defined]
    event = message_event("old sdk", message_id="om_old1")
    fake.receive(event)
    assert await asyncio.to_thread(bridge.do_without_validation, json.dumps(event).encode()) is None
    assert [k async for k in redis_client.scan_iter(match=f"{prefix}:*dedup*om_old1")]
    value = {"conversation": f"{INTEGRATION}|p2p:oc_p2p1", "turnId": "t1", "action": "retry"}
    click = json.dumps(card_click(value, message_id="om_card")).encode()
    answer = await asyncio.to_thread(bridge.do_without_validation, click)
    assert answer is not None and answer["toast"]["content"] == "Retrying…"


async def test_a_re_pushed_frame_is_answered_again_and_makes_no_second_reply(
    gateway: InProcessGateway, fake: FakeLark
) -> None:
    """Lark re-pushes what it thinks failed, and re-sends some events even after success
    (event overview: "即使成功接收，仍会收到重复消息"): the same frame twice is one turn."""
    await eventually(lambda: fake.sockets)
    frame = await fake.push(message_event("twice over the socket", message_id="om_rp1"))
    assert (await fake.wait_ack(frame))["code"] == 200
    await fake.repush(frame)
    assert (await fake.wait_ack(frame))["code"] == 200

    def replies() -> list[Any]:
        return [m for m in fake.messages.values() if m["parent_id"] == "om_rp1"]

    await eventually(replies)
    await eventually(lambda: not gateway.gateway.runner.active)
    assert len(replies()) == 1
