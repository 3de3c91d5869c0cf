"""DingTalk stream mode end to end: connection open on apiBase, CALLBACK frames acked only after
intake, SYSTEM ping/disconnect, reconnect with a fresh ticket, readiness; and the AI card
(createAndDeliver, streaming, instance updates, card callbacks), platforms.md §2.1, §2.6."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.conftest import eventually
from tests.dingtalk_support import DingTalkHarness, robot_message, running
from tests.fakes.dingtalk import FakeDingTalk

ROBOT = "/v1.0/im/bot/messages/get"
CARD = "/v1.0/card/instances/callback"
Harness = tuple[FakeDingTalk, DingTalkHarness]


@pytest.fixture
async def dt(prefix: str, redis_client: Any) -> AsyncIterator[Harness]:
    async with running(prefix, connectionMode="stream") as pair:
        yield pair


async def readyz(h: DingTalkHarness) -> tuple[int, dict[str, Any]]:
    async with h.http.get(f"{h.base}/readyz") as resp:
        return resp.status, await resp.json()


async def test_stream_connects_with_both_topics_and_reports_ready(dt: Harness) -> None:
    fake, h = dt
    await eventually(lambda: fake.stream.connects == 1)
    [opened] = fake.stream.opens
    assert opened["clientId"] == "dingappkey" and opened["clientSecret"] == "dt-app-secret"
    assert {s["topic"] for s in opened["subscriptions"]} == {ROBOT, CARD}
    status, body = await eventually(readyz_when(h, ready=True))
    assert status == 200 and body["checks"]["dt"]["state"] == "connected"


def readyz_when(h: DingTalkHarness, *, ready: bool) -> Any:
    async def check() -> Any:
        status, body = await readyz(h)
        return (status, body) if body["checks"]["dt"]["ready"] is ready else None

    return check


async def test_message_frame_is_acked_after_intake_and_answered(dt: Harness) -> None:
    fake, _h = dt
    mid = await fake.push("CALLBACK", ROBOT, robot_message(fake, "via stream"))
    [ack] = await eventually(lambda: fake.stream.acks.get(mid))
    assert ack["code"] == 200 and json.loads(ack["data"]) == {"response": None}
    await eventually(lambda: len(fake.sent()) >= 2)
    assert fake.sent()[1]["text"] == "You said:\n> via stream"


async def test_same_message_delivered_twice_gets_one_reply(dt: Harness) -> None:
    fake, _h = dt
    message = robot_message(fake, "twice", msg_id="msg-stream-dup")
    first = await fake.push("CALLBACK", ROBOT, message)
    second = await fake.push("CALLBACK", ROBOT, message)
    await eventually(lambda: first in fake.stream.acks and second in fake.stream.acks)
    await eventually(lambda: len(fake.sent()) >= 2)
    await eventually(lambda: not fake.stream.unacked)
    assert len(fake.sent()) == 2


async def test_ping_is_echoed(dt: Harness) -> None:
    fake, _ = dt
    mid = await fake.push("SYSTEM", "ping", {"opaque": "abc"})
    [ack] = await eventually(lambda: fake.stream.acks.get(mid))
    assert ack["code"] == 200 and json.loads(ack["data"]) == {"opaque": "abc"}


async def test_disconnect_reconnects_without_losing_an_unacked_message(dt: Harness) -> None:
    fake, _h = dt
    await eventually(lambda: fake.stream.connects == 1)
    fake.stream.drop_acks = True  # this connection's acks never reach the server
    lost = await fake.push("CALLBACK", ROBOT, robot_message(fake, "in flight", msg_id="m-flight"))
    await eventually(lambda: len(fake.sent()) >= 1)  # it was stored and is being answered
    await fake.push("SYSTEM", "disconnect", {"reason": "upgrade"})
    fake.stream.drop_acks = False
    await eventually(lambda: fake.stream.connects == 2)
    assert len(fake.stream.opens) == 2  # a fresh ticket
    # The un-acked frame is pushed again on the new connection: acked now, answered once.
    [ack] = await eventually(lambda: fake.stream.acks.get(lost))
    assert ack["code"] == 200
    after = await fake.push("CALLBACK", ROBOT, robot_message(fake, "after", sender="staff2"))
    await eventually(lambda: after in fake.stream.acks)
    await eventually(lambda: len(fake.sent()) >= 4)
    texts = sorted(m["text"] for m in fake.sent())
    assert texts.count("You said:\n> in flight") == 1
    assert "You said:\n> after" in texts


async def test_connection_lost_is_unready_then_reconnects(dt: Harness) -> None:
    fake, h = dt
    await eventually(lambda: fake.stream.connects == 1)
    fake.flow_control("/v1.0/gateway/connections/open", times=2)
    for ws in fake.stream.sockets:
        await ws.close()
    status, _body = await eventually(readyz_when(h, ready=False))
    assert status == 503
    await eventually(lambda: fake.stream.connects == 2, timeout=15)
    await eventually(readyz_when(h, ready=True))


def card_frames(fake: FakeDingTalk) -> list[dict[str, Any]]:
    return fake.bodies("/v1.0/card/streaming", "PUT")


async def test_ai_card_is_created_streamed_and_finalized(prefix: str, redis_client: Any) -> None:
    async with running(prefix, connectionMode="stream", cardTemplateId="tpl.schema") as (fake, _h):
        fake.flow_control("/v1.0/card/streaming", times=2)  # throttled: backs off, still lands
        await fake.push("CALLBACK", ROBOT, robot_message(fake, "card please", group=True))
        await eventually(lambda: any(f["isFinalize"] for f in card_frames(fake)))
        [created] = fake.bodies("/v1.0/card/instances/createAndDeliver")
        assert created["cardTemplateId"] == "tpl.schema" and created["callbackType"] == "STREAM"
        assert created["openSpaceId"] == "dtv1.card//IM_GROUP.cidGROUP"
        assert created["imGroupOpenDeliverModel"]["robotCode"] == "dingappkey"
        params = created["cardData"]["cardParamMap"]
        assert params["showStop"] == "true" and params["conversation"].startswith("dt|")
        assert all(isinstance(v, str) for v in params.values())
        frames = card_frames(fake)
        track = created["outTrackId"]
        assert {f["outTrackId"] for f in frames} == {track}
        assert [f["isFinalize"] for f in frames] == [False] * (len(frames) - 1) + [True]
        assert len({f["guid"] for f in frames}) == len(frames) and all(f["isFull"] for f in frames)
        assert frames[-1]["content"] == "You said:\n> card please"
        updates = fake.bodies("/v1.0/card/instances", "PUT")
        last = updates[-1]["cardData"]["cardParamMap"]
        assert (
            last["flowStatus"] == "3" and last["showNew"] == "true" and last["showStop"] == "false"
        )
        assert "✅ Writing the answer" in last["steps"]
        assert fake.sent() == []  # no markdown messages in card mode


async def test_card_callbacks_stop_and_new(prefix: str, redis_client: Any) -> None:
    slow = [{"id": "echo", "kind": "echo", "stepDelayMs": 400, "charDelayMs": 40}]
    async with running(
        prefix, experts=slow, connectionMode="stream", cardTemplateId="tpl.schema"
    ) as (fake, _h):
        await fake.push("CALLBACK", ROBOT, robot_message(fake, "stop me " * 8))
        [created] = await eventually(lambda: fake.bodies("/v1.0/card/instances/createAndDeliver"))
        assert created["openSpaceId"] == "dtv1.card//IM_ROBOT.staff1"
        params = created["cardData"]["cardParamMap"]

        def click(action: str) -> dict[str, Any]:
            button = {
                "action": action,
                "conversation": params["conversation"],
                "turnId": params["turnId"],
            }
            content = {"cardPrivateData": {"actionIds": [action], "params": button}}
            return {
                "type": "actionCallback",
                "outTrackId": created["outTrackId"],
                "corpId": "dingcorp",
                "userId": "staff1",
                "userIdType": 1,
                "spaceType": "IM_ROBOT",
                "spaceId": "staff1",
                "content": json.dumps(content),
                "extension": "{}",
            }

        stop = await fake.push("CALLBACK", CARD, click("stop"))
        [ack] = await eventually(lambda: fake.stream.acks.get(stop))
        answer = json.loads(ack["data"])["response"]
        assert answer["cardData"]["cardParamMap"]["statusText"] == "Stopping…"
        final = await eventually(lambda: [f for f in card_frames(fake) if f["isFinalize"]])
        assert len(final) == 1
        last = fake.bodies("/v1.0/card/instances", "PUT")[-1]["cardData"]["cardParamMap"]
        assert last["status"] == "cancelled" and last["showNew"] == "true"

        new = await fake.push("CALLBACK", CARD, click("new"))
        await eventually(lambda: new in fake.stream.acks)
        [notice] = await eventually(lambda: fake.sent())
        assert notice["text"].startswith("Started a new conversation")
        assert notice["via"] == "webhook"  # the conversation's webhook is still valid
