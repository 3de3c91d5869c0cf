"""The WeCom AI-bot long connection against a fake that behaves as the real server does
(tests/fakes/wecom_ws.py): another client taking the bot (``disconnected_event``), two unacked
pings, replies waiting for their acks one req_id at a time, WeCom's refusals (846605, 846608),
and card clicks in both shapes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from adapters.wecom.events import aibot_envelope
from tests.fakes.wecom import FakeWeCom
from tests.support.helpers import InProcessGateway
from tests.support.waits import eventually
from tests.support.wecom import ECHO_SLOW, aibot_click, aibot_message, start_gateway


async def ws_gateway(
    gateways: list[Any], prefix: str, fake: FakeWeCom, **kw: Any
) -> InProcessGateway:
    kw.setdefault("pingIntervalSeconds", 0.2)
    gw = await start_gateway(prefix, fake, "aibot_ws", **kw)
    gateways.append(gw)
    return gw


def state_of(gw: InProcessGateway) -> dict[str, Any]:
    state: dict[str, Any] = gw.gateway.adapters["wc"].readiness()
    return state


def conn_of(gw: InProcessGateway) -> Any:
    return gw.gateway.adapters["wc"].outbound  # type: ignore[attr-defined]


def message(msg_id: str, text: str, user: str = "alice") -> dict[str, Any]:
    return aibot_message(msg_id, "text", {"content": text}, user=user, create_time=1700000000)


def sent(fake: FakeWeCom, msgtype: str) -> list[dict[str, Any]]:
    frames = [f for f in fake.frames if f.get("cmd") == "aibot_send_msg"]
    return [f for f in frames if f["body"].get("msgtype") == msgtype]


async def stays(check: Callable[[], bool], seconds: float) -> None:
    """``check`` holds for the whole of ``seconds``: the time is the subject here."""
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        assert check()
        await asyncio.sleep(0.05)  # a poll: the time is what is under test


@asynccontextmanager
async def another_client(fake: FakeWeCom) -> AsyncIterator[aiohttp.ClientWebSocketResponse]:
    """Another process subscribing the same bot (a second deployment, a developer's laptop)."""
    async with aiohttp.ClientSession() as http, http.ws_connect(fake.ws_url) as ws:
        body = {"bot_id": fake.bot_id, "secret": fake.bot_secret}
        headers = {"req_id": "aibot_subscribe_1_other"}
        await ws.send_json({"cmd": "aibot_subscribe", "headers": headers, "body": body})
        assert (await ws.receive_json(timeout=5))["errcode"] == 0
        yield ws


async def test_another_client_taking_the_bot_stops_reconnects_until_the_hold_ends(
    gateways: list[Any], prefix: str, fake: FakeWeCom
) -> None:
    gw = await ws_gateway(gateways, prefix, fake, displacedRetrySeconds=3)
    await eventually(lambda: fake.subscribes == 1)
    async with another_client(fake) as other:
        state = await eventually(lambda: state_of(gw)["state"] == "displaced" and state_of(gw))
        assert fake.ws.kicked == 1 and state["ready"] is False and state["displacedUntil"]
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{gw.port}/readyz") as resp:
                assert resp.status == 503
                assert (await resp.json())["checks"]["wc"]["state"] == "displaced"
        # The official SDK never reconnects after the event; the gateway holds off (a plain
        # reconnect would come after 1 s and kick the other client right back).
        await stays(lambda: fake.subscribes == 2, 2.0)
        # After the hold the lease decides again: the gateway connects, the other is kicked.
        await eventually(lambda: fake.subscribes == 3, timeout=5)
        frame = await other.receive_json(timeout=5)
    assert frame["cmd"] == "aibot_event_callback"
    assert frame["body"]["event"]["eventtype"] == "disconnected_event"
    await eventually(lambda: state_of(gw)["state"] == "connected")
    await fake.push("aibot_msg_callback", message("w-20", "back again"), "req-20")
    frames = await eventually(lambda: fake.stream_frames("req-20")[-1:], timeout=10)
    assert frames[0]["body"]["stream"]["id"]


async def test_a_displaced_bot_keeps_every_replica_off(
    gateways: list[Any], prefix: str, fake: FakeWeCom
) -> None:
    lease = {"connectionLeaseSeconds": 1.5}  # standby checks every 0.5 s
    first = await ws_gateway(gateways, prefix, fake, displacedRetrySeconds=3, runtime=lease)
    await eventually(lambda: state_of(first)["state"] == "connected")
    second = await ws_gateway(gateways, prefix, fake, displacedRetrySeconds=3, runtime=lease)
    await eventually(lambda: state_of(second)["state"] == "standby")
    async with another_client(fake):
        await eventually(
            lambda: {state_of(first)["state"], state_of(second)["state"]} == {"displaced"}
        )
        await stays(lambda: fake.subscribes == 2, 1.5)  # neither replica connects
    await eventually(lambda: fake.subscribes == 3, timeout=5)
    # One connects once the hold ends; the other, which lost the lease race, stays off.
    await stays(lambda: fake.subscribes == 3 and len(fake.ws.subscribed) == 1, 0.3)


async def test_a_kick_by_our_own_replica_is_a_handover(
    gateways: list[Any], prefix: str, fake: FakeWeCom
) -> None:
    gw = await ws_gateway(gateways, prefix, fake)
    await eventually(lambda: state_of(gw)["state"] == "connected")
    conn = conn_of(gw)
    # Another replica holds the lease now (this one stalled past it) and connects.
    await conn.records.put("wecom-ws", f"{fake.bot_id}:owner", "replica-b", ttl_ms=60_000)
    async with another_client(fake):
        await eventually(lambda: state_of(gw)["state"] == "standby")
        assert state_of(gw)["ready"] is True
        assert await conn.share.displaced_until() is None
        await stays(lambda: fake.subscribes == 2, 0.5)


async def test_two_unanswered_pings_mean_a_dead_connection(
    gateways: list[Any], prefix: str, fake: FakeWeCom
) -> None:
    gw = await ws_gateway(gateways, prefix, fake)
    await eventually(lambda: fake.pings >= 2)  # answered pings keep the connection
    assert fake.subscribes == 1
    fake.ws.answer_pings = False  # the connection goes silent; the socket stays open
    await eventually(lambda: fake.ws.closed, timeout=5)
    fake.ws.answer_pings = True
    await eventually(lambda: state_of(gw)["state"] == "connected" and fake.subscribes == 2)
    # ws.ts: each tick first counts the unacked pings; at two the connection is dead, so
    # exactly two went unanswered on the old socket before the gateway closed it.
    assert fake.ws.closed[0].unanswered == 2
    assert conn_of(gw).connects == 2


async def test_replies_sharing_a_req_id_wait_for_each_ack(
    gateways: list[Any], prefix: str, fake: FakeWeCom
) -> None:
    fake.ws.ack_delay_s = 0.25  # slower than the renderer's 100 ms updates
    await ws_gateway(gateways, prefix, fake, expert=ECHO_SLOW)
    await eventually(lambda: fake.subscribes == 1)
    await fake.push("aibot_msg_callback", message("w-21", "one at a time"), "req-21")
    frames = await eventually(
        lambda: (f := fake.stream_frames("req-21")) and f[-1]["body"]["stream"]["finish"] and f,
        timeout=20,
    )
    assert frames[-1]["body"]["stream"]["content"].endswith("You said:\n> one at a time")
    assert fake.ws.overlaps == [] and fake.ws.refused() == []
    assert len(frames) >= 3  # still streamed (unsent snapshots are replaced, not dropped)


async def test_a_stream_wecom_expired_finishes_in_a_new_message(
    gateways: list[Any], prefix: str, fake: FakeWeCom
) -> None:
    fake.ws.stream_lifetime_s = 0.8  # WeCom's 6 minutes, shortened
    await ws_gateway(gateways, prefix, fake, expert=ECHO_SLOW)
    await eventually(lambda: fake.subscribes == 1)
    await fake.push("aibot_msg_callback", message("w-22", "a slow one"), "req-22")
    [answer] = await eventually(lambda: sent(fake, "markdown"), timeout=20)
    assert answer["body"]["chatid"] == "alice"
    assert answer["body"]["markdown"]["content"] == "You said:\n> a slow one"
    assert [a["errcode"] for a in fake.ws.refused()] == [846608]
    await gateways.idle()
    assert len(sent(fake, "markdown")) == 1


async def test_a_text_answering_a_click_is_a_message_not_a_reply_on_the_event(
    gateways: list[Any], prefix: str, fake: FakeWeCom
) -> None:
    await ws_gateway(gateways, prefix, fake)
    await eventually(lambda: fake.subscribes == 1)
    await fake.push("aibot_msg_callback", message("w-23", "hi"), "req-23")  # the chat exists
    await eventually(
        lambda: (f := fake.stream_frames("req-23")) and f[-1]["body"]["stream"]["finish"]
    )
    value = {"conversation": "wc|p2p:alice", "turnId": "t-gone", "action": "confirm"}
    await fake.push("aibot_event_callback", aibot_click("ev-23", json.dumps(value), "task-23"))
    [note] = await eventually(lambda: sent(fake, "markdown"), timeout=10)
    assert "confirmation" in note["body"]["markdown"]["content"]
    assert fake.ws.refused() == []  # no 846605: nothing went out on the event's req_id


def finished(fake: FakeWeCom, req_id: str) -> list[dict[str, Any]]:
    frames = fake.stream_frames(req_id)
    return frames if frames and frames[-1]["body"]["stream"]["finish"] else []


async def test_a_reply_made_while_reconnecting_is_sent_after_it(
    gateways: list[Any], prefix: str, fake: FakeWeCom
) -> None:
    gw = await ws_gateway(gateways, prefix, fake)
    await eventually(lambda: fake.subscribes == 1)
    await fake.push("aibot_msg_callback", message("w-26", "hi"), "req-26")  # the chat exists
    await eventually(lambda: finished(fake, "req-26"))
    await fake.drop()
    await eventually(lambda: state_of(gw)["state"] == "reconnecting")
    envelope = aibot_envelope("wc", message("w-26b", "later"))  # no req_id: a message of its own
    assert envelope is not None
    await gw.gateway.adapters["wc"].send_text(envelope, "meanwhile", idempotency_key="k-26")
    [note] = await eventually(lambda: sent(fake, "markdown"), timeout=10)
    assert note["body"]["markdown"]["content"] == "meanwhile" and fake.subscribes == 2


async def test_a_group_turn_streams_without_a_stop_card(
    gateways: list[Any], prefix: str, fake: FakeWeCom
) -> None:
    await ws_gateway(gateways, prefix, fake, expert=ECHO_SLOW)
    await eventually(lambda: fake.subscribes == 1)
    body = aibot_message("w-27", "text", {"content": "@bot hi all"}, chattype="group")
    await fake.push("aibot_msg_callback", {**body, "chatid": "grp-1"}, "req-27")
    frames = await eventually(lambda: finished(fake, "req-27"), timeout=20)
    assert frames[-1]["body"]["stream"]["content"].endswith("You said:\n> hi all")
    assert sent(fake, "template_card") == [] and fake.ws.refused() == []


@pytest.mark.parametrize("shape", ["nested", "flat"])
async def test_a_stop_click_works_in_both_event_shapes(
    shape: str, gateways: list[Any], prefix: str, fake: FakeWeCom
) -> None:
    await ws_gateway(gateways, prefix, fake, expert=ECHO_SLOW)
    await eventually(lambda: fake.subscribes == 1)
    await fake.push("aibot_msg_callback", message("w-24", "stop me"), "req-24")
    [card_frame] = await eventually(lambda: sent(fake, "template_card"))
    card = card_frame["body"]["template_card"]
    [stop] = [b for b in card["button_list"] if json.loads(b["key"])["action"] == "stop"]
    click = aibot_click("ev-24", stop["key"], card["task_id"])
    if shape == "flat":  # aibot-node-sdk src/types/event.ts TemplateCardEventData
        event = click["event"]
        click["event"] = {"eventtype": "template_card_event", **event.pop("template_card_event")}
    req_id = await fake.push("aibot_event_callback", click)
    [update] = await eventually(
        lambda: [f for f in fake.frames if f["cmd"] == "aibot_respond_update_msg"]
    )
    assert update["headers"]["req_id"] == req_id
    assert update["body"]["template_card"]["task_id"] == card["task_id"]
    assert fake.ws.refused() == []


@pytest.mark.parametrize("shape", ["nested", "flat"])
def test_template_card_event_is_read_nested_and_flat(shape: str) -> None:
    key = json.dumps({"conversation": "wc|p2p:bob", "turnId": "t1", "action": "stop"})
    click = {"event_key": key, "task_id": "T"}
    event: dict[str, Any] = {"eventtype": "template_card_event"}
    event.update({"template_card_event": click} if shape == "nested" else click)
    envelope = aibot_envelope("wc", aibot_message("ev-25", "event", event, user="bob"), req_id="r")
    assert envelope is not None and envelope.action is not None
    assert envelope.action.id == "stop" and envelope.action.message_id == "T"
    assert envelope.action.value["turnId"] == "t1"
