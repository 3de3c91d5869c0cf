"""DingTalk stream mode end to end: connection open on apiBase, CALLBACK frames acked only after
intake, SYSTEM ping/disconnect, reconnect with a fresh ticket, readiness (docs/dingtalk.md, "Stream
mode"). The fake pushes a CALLBACK once, never again, as the real server does."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.fakes.dingtalk import FakeDingTalk
from tests.support.dingtalk import DingTalkHarness, robot_message, running
from tests.support.waits import eventually

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
    assert [a["code"] for a in fake.stream.acks[first] + fake.stream.acks[second]] == [200, 200]
    # A later message of the same chat is answered after any second answer would have been.
    await eventually(lambda: len(fake.sent()) >= 2)
    await fake.push("CALLBACK", ROBOT, robot_message(fake, "then"))
    await eventually(lambda: any(m["text"] == "You said:\n> then" for m in fake.sent()))
    texts = [m["text"] for m in fake.sent()]
    assert texts.count("You said:\n> twice") == 1 and len(texts) == 4


async def test_ping_is_echoed(dt: Harness) -> None:
    fake, _ = dt
    mid = await fake.gateway.ping("abc")
    [ack] = await eventually(lambda: fake.stream.acks.get(mid))
    assert ack["code"] == 200 and json.loads(ack["data"]) == {"opaque": "abc"}


async def test_disconnect_drains_in_flight_frames_then_reconnects_with_a_fresh_ticket(
    dt: Harness,
) -> None:
    """The real server pushes a frame once and never again (stream protocol FAQ), so a frame
    in flight when a disconnect comes must be stored and acked on the old connection."""
    fake, _h = dt
    fake.gateway.disconnect_grace_s = 0.5
    await eventually(lambda: fake.stream.connects == 1)
    first = await fake.push("CALLBACK", ROBOT, robot_message(fake, "in flight", msg_id="m-fl"))
    await fake.gateway.disconnect("connection is expired")
    await eventually(lambda: fake.stream.connects == 2)
    assert len(fake.stream.opens) == 2  # a fresh ticket
    [ack] = await eventually(lambda: fake.stream.acks.get(first))
    assert ack["code"] == 200 and ack["connection"] == 1
    after = await fake.push("CALLBACK", ROBOT, robot_message(fake, "after", sender="staff2"))
    await eventually(lambda: after in fake.stream.acks)
    await eventually(lambda: len(fake.sent()) >= 4)
    texts = sorted(m["text"] for m in fake.sent())
    assert texts.count("You said:\n> in flight") == 1
    assert "You said:\n> after" in texts
    assert fake.stream.pushes[first] == 1


async def test_a_refused_robot_message_is_not_pushed_again(dt: Harness) -> None:
    """A frame acked with an error is gone: DingTalk does not push robot messages again (the
    stream protocol FAQ: "机器人消息当前是fire-forgot模式"), not even after a reconnect."""
    fake, _h = dt
    junk = {"msgtype": "text", "text": {"content": "no sender"}, "conversationType": "1"}
    mid = await fake.push("CALLBACK", ROBOT, junk)
    [ack] = await eventually(lambda: fake.stream.acks.get(mid))
    assert ack["code"] == 400
    for ws in fake.stream.sockets:
        await ws.close()
    await eventually(lambda: fake.stream.connects == 2)
    good = await fake.push("CALLBACK", ROBOT, robot_message(fake, "next one"))
    await eventually(lambda: len(fake.sent()) >= 2)
    assert fake.stream.pushes == {mid: 1, good: 1}
    assert fake.stream.acks[mid] == [ack]


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
