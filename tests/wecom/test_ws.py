"""WeCom AI bot over the long connection, end to end against a fake WebSocket server:
subscribe, ping, stream frames reusing the inbound req_id, reconnect, one owner per bot."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

from tests.fakes.wecom import FakeWeCom
from tests.support.helpers import InProcessGateway
from tests.support.waits import eventually
from tests.support.wecom import (
    ECHO_SLOW,
    aibot_click,
    aibot_message,
    start_gateway,
)

ECHO_SILENT = {"id": "echo", "kind": "echo", "stepDelayMs": 1200, "charDelayMs": 0}


async def ws_gateway(
    gateways: list[Any], prefix: str, fake: FakeWeCom, **kw: Any
) -> InProcessGateway:
    kw.setdefault("pingIntervalSeconds", 0.2)
    gw = await start_gateway(prefix, fake, "aibot_ws", **kw)
    gateways.append(gw)
    return gw


def message(msg_id: str, text: str, user: str = "alice") -> dict[str, Any]:
    return aibot_message(msg_id, "text", {"content": text}, user=user, create_time=1700000000)


def sent_messages(fake: FakeWeCom, msgtype: str) -> list[dict[str, Any]]:
    return [
        f
        for f in fake.frames
        if f.get("cmd") == "aibot_send_msg" and f["body"].get("msgtype") == msgtype
    ]


def finished(fake: FakeWeCom, req_id: str) -> list[dict[str, Any]]:
    frames = fake.stream_frames(req_id)
    return frames if frames and frames[-1]["body"]["stream"]["finish"] else []


async def test_subscribe_ping_and_stream_frames_reuse_the_req_id(
    gateways: list[Any], prefix: str, fake: FakeWeCom
) -> None:
    gw = await ws_gateway(gateways, prefix, fake, expert=ECHO_SLOW)
    await eventually(lambda: fake.subscribes == 1)
    subscribe = next(f for f in fake.frames if f["cmd"] == "aibot_subscribe")
    assert subscribe["body"] == {"bot_id": "aib-1", "secret": "bs3cret"}
    await fake.push("aibot_msg_callback", message("w-1", "hello ws"), "req-1")
    frames = await eventually(lambda: finished(fake, "req-1"), timeout=15)
    streams = [f["body"]["stream"] for f in frames]
    assert len({s["id"] for s in streams}) == 1
    assert streams[-1]["content"].endswith("You said:\n> hello ws")
    assert len(streams) >= 3  # streamed, not only a final frame
    assert all(len(s["content"].encode()) <= 20_480 for s in streams)
    assert all(not s["finish"] for s in streams[:-1])
    await eventually(lambda: fake.pings >= 2)
    assert gw.gateway.adapters["wc"].readiness()["state"] == "connected"


async def test_duplicate_callback_makes_one_reply(
    gateways: list[Any], prefix: str, fake: FakeWeCom
) -> None:
    await ws_gateway(gateways, prefix, fake)
    await eventually(lambda: fake.subscribes == 1)
    await fake.push("aibot_msg_callback", message("w-2", "once"), "req-2")
    await fake.push("aibot_msg_callback", message("w-2", "once"), "req-2b")
    await eventually(lambda: finished(fake, "req-2"))
    await gateways.idle()
    assert fake.stream_frames("req-2b") == []


async def test_reconnects_after_the_server_drops_the_socket(
    gateways: list[Any], prefix: str, fake: FakeWeCom
) -> None:
    await ws_gateway(gateways, prefix, fake)
    await eventually(lambda: fake.subscribes == 1)
    await fake.drop()
    await eventually(lambda: fake.subscribes == 2, timeout=10)
    await fake.push("aibot_msg_callback", message("w-3", "after reconnect"), "req-3")
    frames = await eventually(lambda: finished(fake, "req-3"))
    assert frames[-1]["body"]["stream"]["content"].endswith("> after reconnect")


async def test_two_replicas_keep_one_connection_and_both_answer(
    gateways: list[Any], prefix: str, fake: FakeWeCom
) -> None:
    first = await ws_gateway(gateways, prefix, fake)
    await eventually(lambda: fake.subscribes == 1)
    second = await ws_gateway(gateways, prefix, fake)
    await eventually(
        lambda: (
            {
                first.gateway.adapters["wc"].readiness()["state"],
                second.gateway.adapters["wc"].readiness()["state"],
            }
            == {"connected", "standby"}
        )
    )
    for i in range(6):  # turns run on either replica; the owner relays the other's frames
        await fake.push("aibot_msg_callback", message(f"w-4{i}", f"n{i}", f"u{i}"), f"req-4{i}")
    for i in range(6):
        frames = await eventually(lambda i=i: finished(fake, f"req-4{i}"))
        assert frames[-1]["body"]["stream"]["content"].endswith(f"> n{i}")
    assert fake.subscribes == 1 and len(fake.ws.subscribed) == 1
    assert fake.ws.refused() == [] and fake.ws.overlaps == []


async def test_refused_subscription_is_not_ready(
    gateways: list[Any], prefix: str, fake: FakeWeCom
) -> None:
    gw = await ws_gateway(gateways, prefix, fake, botSecret="not-the-secret")
    state = await eventually(
        lambda: (s := gw.gateway.adapters["wc"].readiness())["state"] == "refused" and s
    )
    assert state["ready"] is False and "853000" in state["error"]
    assert fake.subscribes == 0


async def test_a_turn_past_the_stream_window_finishes_in_a_new_message(
    gateways: list[Any], prefix: str, fake: FakeWeCom
) -> None:
    await ws_gateway(gateways, prefix, fake, expert=ECHO_SLOW, streamWindowSeconds=1)
    await eventually(lambda: fake.subscribes == 1)
    await fake.push("aibot_msg_callback", message("w-5", "a slow one"), "req-5")
    frames = await eventually(lambda: finished(fake, "req-5"), timeout=15)
    assert "new message" in frames[-1]["body"]["stream"]["content"]
    sent = await eventually(lambda: sent_messages(fake, "markdown"))
    assert sent[0]["body"]["chatid"] == "alice"
    assert sent[0]["body"]["markdown"]["content"] == "You said:\n> a slow one"
    await gateways.idle()
    assert len(finished(fake, "req-5")) == len(frames)


async def test_a_silent_expert_gets_keep_alive_frames_then_the_cut(
    gateways: list[Any], prefix: str, fake: FakeWeCom
) -> None:
    # A 1.5 s window: keep-alives every 0.5 s; each step of the expert is 1.2 s of silence.
    await ws_gateway(gateways, prefix, fake, expert=ECHO_SILENT, streamWindowSeconds=1.5)
    await eventually(lambda: fake.subscribes == 1)
    await fake.push("aibot_msg_callback", message("w-6", "quiet please"), "req-6")
    frames = await eventually(lambda: finished(fake, "req-6"), timeout=10)
    streams = [f["body"]["stream"] for f in frames]
    # Frames repeating the previous content are keep-alives: no progress came in between.
    repeats = [b for a, b in itertools.pairwise(streams) if a["content"] == b["content"]]
    assert repeats and all(not s["finish"] for s in repeats)
    assert "new message" in streams[-1]["content"]
    assert len({s["id"] for s in streams}) == 1
    sent = await eventually(lambda: sent_messages(fake, "markdown"), timeout=10)
    assert sent[0]["body"]["markdown"]["content"] == "You said:\n> quiet please"
    await asyncio.sleep(0.6)  # longer than a keep-alive period: nothing more on the cut stream
    assert len(fake.stream_frames("req-6")) == len(frames)


async def test_stop_card_click_stops_the_turn_and_updates_the_card(
    gateways: list[Any], prefix: str, fake: FakeWeCom
) -> None:
    await ws_gateway(gateways, prefix, fake, expert=ECHO_SLOW)
    await eventually(lambda: fake.subscribes == 1)
    await fake.push("aibot_msg_callback", message("w-7", "stop me"), "req-7")
    [card_frame] = await eventually(lambda: sent_messages(fake, "template_card"))
    card = card_frame["body"]["template_card"]
    assert card_frame["body"]["chatid"] == "alice" and card["card_type"] == "button_interaction"
    [stop] = [b for b in card["button_list"] if json.loads(b["key"])["action"] == "stop"]
    value = json.loads(stop["key"])
    assert value["conversation"] and value["turnId"]
    click = aibot_click("ev-7", stop["key"], card["task_id"])
    await fake.push("aibot_event_callback", click, "req-click-7")
    [update] = await eventually(
        lambda: [f for f in fake.frames if f["cmd"] == "aibot_respond_update_msg"]
    )
    assert update["headers"]["req_id"] == "req-click-7"
    assert update["body"]["response_type"] == "update_template_card"
    assert update["body"]["template_card"]["task_id"] == card["task_id"]
    assert update["body"]["template_card"]["main_title"]["title"] == "Stop requested"
    frames = await eventually(lambda: finished(fake, "req-7"), timeout=10)
    assert "You said:\n> stop me" not in frames[-1]["body"]["stream"]["content"]


async def test_enter_chat_gets_a_welcome(gateways: list[Any], prefix: str, fake: FakeWeCom) -> None:
    await ws_gateway(gateways, prefix, fake)
    await eventually(lambda: fake.subscribes == 1)
    event = {
        "msgid": "ev-8",
        "aibotid": "aib-1",
        "chattype": "single",
        "from": {"userid": "bob"},
        "msgtype": "event",
        "event": {"eventtype": "enter_chat"},
    }
    await fake.push("aibot_event_callback", event, "req-8")
    [welcome] = await eventually(
        lambda: [f for f in fake.frames if f["cmd"] == "aibot_respond_welcome_msg"]
    )
    assert welcome["headers"]["req_id"] == "req-8"
    assert "/new" in welcome["body"]["text"]["content"]
