"""The fake DingTalk itself, against what DingTalk documents (not against our adapter): a plain
WebSocket client checks the stream gateway (STREAM-DOC = open-dingtalk/developerpedia
docs/learn/stream/protocol.md), plain HTTP the OpenAPI refusals (DOC:<slug> =
https://open.dingtalk.com/document/development/<slug>)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.fakes.dingtalk import CLIENT_ID, CLIENT_SECRET, FakeDingTalk
from tests.support.waits import eventually

ROBOT = "/v1.0/im/bot/messages/get"
CARD = "/v1.0/card/instances/callback"
SUBSCRIBE = [{"type": "EVENT", "topic": "*"}, {"type": "CALLBACK", "topic": ROBOT}]


@pytest.fixture
async def fake() -> AsyncIterator[FakeDingTalk]:
    server = FakeDingTalk()
    server.gateway.event_ack_timeout_s = 0.3
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def ticket(http: aiohttp.ClientSession, fake: FakeDingTalk, subs: Any = None) -> str:
    body = {
        "clientId": CLIENT_ID,
        "clientSecret": CLIENT_SECRET,
        "subscriptions": subs or SUBSCRIBE,
    }
    async with http.post(f"{fake.base}/v1.0/gateway/connections/open", json=body) as resp:
        assert resp.status == 200
        answer = await resp.json()
    assert answer["endpoint"] == f"ws://127.0.0.1:{fake.port}/connect"
    return str(answer["ticket"])


async def connect(
    http: aiohttp.ClientSession, fake: FakeDingTalk, subs: Any = None
) -> aiohttp.ClientWebSocketResponse:
    return await http.ws_connect(f"{fake.base}/connect?ticket={await ticket(http, fake, subs)}")


async def frame(ws: aiohttp.ClientWebSocketResponse) -> dict[str, Any]:
    got: dict[str, Any] = json.loads(await ws.receive_str(timeout=5))
    return got


def ack(pushed: dict[str, Any], code: int = 200, data: Any = None) -> str:
    headers = {"messageId": pushed["headers"]["messageId"], "contentType": "application/json"}
    return json.dumps({"code": code, "headers": headers, "message": "OK", "data": json.dumps(data)})


async def test_a_ticket_opens_one_connection_within_90_seconds(
    fake: FakeDingTalk, http: aiohttp.ClientSession
) -> None:
    """STREAM-DOC step 1: "ticket的有效期为90秒且只能用来建立一条连接"."""
    once = await ticket(http, fake)
    ws = await http.ws_connect(f"{fake.base}/connect?ticket={once}")
    with pytest.raises(aiohttp.WSServerHandshakeError):
        await http.ws_connect(f"{fake.base}/connect?ticket={once}")
    stale = await ticket(http, fake)
    fake.gateway.clock = lambda: time.monotonic() + 91
    with pytest.raises(aiohttp.WSServerHandshakeError):
        await http.ws_connect(f"{fake.base}/connect?ticket={stale}")
    assert fake.stream.connects == 1 and fake.stream.refused_handshakes == 2
    await ws.close()


async def test_open_refuses_bad_credentials_and_event_topics_other_than_star(
    fake: FakeDingTalk, http: aiohttp.ClientSession
) -> None:
    url = f"{fake.base}/v1.0/gateway/connections/open"
    wrong = {"clientId": CLIENT_ID, "clientSecret": "nope", "subscriptions": SUBSCRIBE}
    async with http.post(url, json=wrong) as resp:
        assert resp.status == 400
    # STREAM-DOC topic table: EVENT subscriptions support only "*".
    events = [{"type": "EVENT", "topic": "user_add_org"}]
    body = {"clientId": CLIENT_ID, "clientSecret": CLIENT_SECRET, "subscriptions": events}
    async with http.post(url, json=body) as resp:
        assert resp.status == 400


async def test_callbacks_are_pushed_once_whatever_the_ack_events_again_until_consumed(
    fake: FakeDingTalk, http: aiohttp.ClientSession
) -> None:
    """STREAM-DOC FAQ: robot messages are "fire-forgot" and outside event subscriptions the ack
    only serves diagnosis; an EVENT not acked, or acked LATER, is pushed again."""
    ws = await connect(http, fake)
    message = {"msgId": "m1", "text": {"content": "hi"}}
    refused = await fake.push("CALLBACK", ROBOT, message)
    ignored = await fake.push("CALLBACK", ROBOT, message)
    first = await frame(ws)
    assert first["headers"]["messageId"] == refused and json.loads(first["data"]) == message
    await ws.send_str(ack(first, code=500, data={"response": None}))
    await frame(ws)  # no ack at all for the second one
    event = await fake.push("EVENT", "user_add_org", {"userId": ["u1"]})
    pushed = await frame(ws)
    assert pushed["type"] == "EVENT" and pushed["headers"]["eventType"] == "user_add_org"
    again = await frame(ws)  # not acked in time: pushed again
    assert again["headers"]["messageId"] == event
    await ws.send_str(ack(again, data={"status": "LATER", "message": "busy"}))
    last = await frame(ws)  # LATER: consumption failed, pushed again
    assert last["headers"]["messageId"] == event
    await ws.send_str(ack(last, data={"status": "SUCCESS", "message": "ok"}))
    await eventually(lambda: len(fake.stream.acks.get(event, [])) == 2)
    # Redelivery had time to happen three times over; the callbacks were never pushed again.
    assert fake.stream.pushes == {refused: 1, ignored: 1, event: 3}
    await ws.close()


async def test_pushes_go_only_to_connections_subscribed_to_the_topic(
    fake: FakeDingTalk, http: aiohttp.ClientSession
) -> None:
    ws = await connect(http, fake, [{"type": "CALLBACK", "topic": ROBOT}])
    with pytest.raises(AssertionError, match="no stream connection"):
        await fake.gateway.push("CALLBACK", CARD, {"outTrackId": "x"}, timeout=0.2)
    with pytest.raises(AssertionError, match="no stream connection"):
        await fake.gateway.push("EVENT", "user_add_org", {}, timeout=0.2)
    await ws.close()


async def test_ping_and_disconnect_frames_as_documented(
    fake: FakeDingTalk, http: aiohttp.ClientSession
) -> None:
    """STREAM-DOC "系统推送": ping carries only ``opaque`` and wants it echoed; disconnect has
    no messageId, wants no ack, and the server closes the socket after 10 s of silence."""
    fake.gateway.disconnect_grace_s = 0.3
    ws = await connect(http, fake)
    mid = await fake.gateway.ping("op-1")
    ping = await frame(ws)
    assert ping["type"] == "SYSTEM" and ping["headers"]["topic"] == "ping"
    assert ping["headers"]["messageId"] == mid and json.loads(ping["data"]) == {"opaque": "op-1"}
    await ws.send_str(ack(ping, data={"opaque": "op-1"}))
    await fake.gateway.disconnect("connection is expired")
    bye = await frame(ws)
    assert bye["headers"] == {"topic": "disconnect", "contentType": "application/json"}
    assert json.loads(bye["data"]) == {"reason": "connection is expired"}
    with pytest.raises(AssertionError):  # nothing more is pushed on a closing connection
        await fake.gateway.push("CALLBACK", ROBOT, {}, timeout=0.2)
    closing = await ws.receive(timeout=5)
    assert closing.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
    await ws.close()


async def call(
    http: aiohttp.ClientSession, fake: FakeDingTalk, method: str, path: str, body: Any, token: str
) -> tuple[int, dict[str, Any]]:
    headers = {"x-acs-dingtalk-access-token": token}
    async with http.request(method, fake.base + path, json=body, headers=headers) as resp:
        return resp.status, await resp.json()


async def test_openapi_refusals_have_dingtalks_shape(
    fake: FakeDingTalk, http: aiohttp.ClientSession
) -> None:
    url = f"{fake.base}/v1.0/oauth2/accessToken"
    async with http.post(url, json={"appKey": CLIENT_ID, "appSecret": "nope"}) as resp:
        assert resp.status == 400  # DOC:obtain-the-access-token-of-an-internal-app
        body = await resp.json()
        assert body["code"] == "invalidClientIdOrSecret"
        assert body["requestid"] == resp.headers["x-acs-request-id"]
    async with http.post(url, json={"appKey": CLIENT_ID, "appSecret": CLIENT_SECRET}) as resp:
        token = (await resp.json())["accessToken"]
    send = "/v1.0/robot/groupMessages/send"
    message = {"robotCode": CLIENT_ID, "openConversationId": "cid1", "msgKey": "sampleMarkdown"}
    # msgParam is measured as sent: "中" is 3 bytes, but 6 once escaped as "\\u4e2d".
    param = {"title": "t", "text": "中" * 4990}
    ok = {**message, "msgParam": json.dumps(param, ensure_ascii=False)}
    escaped = {**message, "msgParam": json.dumps(param)}
    status, body = await call(http, fake, "POST", send, ok, "stale-token")
    assert (status, body["code"]) == (400, "InvalidAuthentication")  # DOC:server-api-error-codes-1
    assert set(body) == {"code", "message", "requestid"}
    status, body = await call(http, fake, "POST", send, ok, token)
    assert status == 200 and set(body) == {"processQueryKey"}
    status, body = await call(http, fake, "POST", send, escaped, token)
    assert (status, body["code"]) == (400, "invalidParameter.msgParam.tooLong")
    fake.flow_control(send)
    status, body = await call(http, fake, "POST", send, ok, token)
    assert (status, body["code"]) == (403, "Forbidden.AccessDenied.QpsLimitForApi")


async def test_cards_answer_with_deliver_results_and_refuse_what_dingtalk_refuses(
    fake: FakeDingTalk, http: aiohttp.ClientSession
) -> None:
    """DOC:create-and-deliver-cards, DOC:interactive-card-update-interface,
    DOC:api-streamingupdate."""
    async with http.post(
        f"{fake.base}/v1.0/oauth2/accessToken",
        json={"appKey": CLIENT_ID, "appSecret": CLIENT_SECRET},
    ) as resp:
        token = (await resp.json())["accessToken"]
    create = "/v1.0/card/instances/createAndDeliver"
    card = {
        "cardTemplateId": "tpl.schema",
        "outTrackId": "t1",
        "cardData": {"cardParamMap": {"content": ""}},
        "openSpaceId": "dtv1.card//IM_GROUP.cid1",
        "imGroupOpenDeliverModel": {"robotCode": CLIENT_ID},
    }
    fake.refuse_delivery("robot is not in this group")
    status, body = await call(http, fake, "POST", create, card, token)
    assert status == 200 and body["success"] is True
    [result] = body["result"]["deliverResults"]
    assert result == {
        "spaceType": "IM_GROUP",
        "spaceId": "cid1",
        "success": False,
        "errorMsg": "robot is not in this group",
    }
    status, body = await call(http, fake, "POST", create, card, token)
    assert (status, body["code"]) == (400, "param.cardAlreadyExist")
    no_model = {k: v for k, v in card.items() if k != "imGroupOpenDeliverModel"}
    status, body = await call(http, fake, "POST", create, {**no_model, "outTrackId": "t2"}, token)
    assert (status, body["code"]) == (400, "param.openDeliverModelEmpty")
    stream = {"outTrackId": "t1", "guid": "g1", "key": "content", "content": "", "isFull": True}
    status, body = await call(http, fake, "PUT", "/v1.0/card/streaming", stream, token)
    assert (status, body["code"]) == (400, "param.stream.contentEmpty")
    missing = {**stream, "outTrackId": "nope", "content": "x"}
    status, body = await call(http, fake, "PUT", "/v1.0/card/streaming", missing, token)
    assert (status, body["code"]) == (400, "param.stream.outTrackId")
    update = {"outTrackId": "nope", "cardData": {"cardParamMap": {"a": "b"}}}
    status, body = await call(http, fake, "PUT", "/v1.0/card/instances", update, token)
    assert (status, body["code"]) == (400, "param.cardNotExist")
    update["outTrackId"] = "t1"
    status, body = await call(http, fake, "PUT", "/v1.0/card/instances", update, token)
    assert (status, body) == (200, {"success": True, "result": True})


async def test_a_session_webhook_past_its_expiry_is_refused(
    fake: FakeDingTalk, http: aiohttp.ClientSession
) -> None:
    markdown = {"msgtype": "markdown", "markdown": {"title": "t", "text": "hi"}}
    live, _ = fake.session_webhook()
    gone, _ = fake.session_webhook(ttl_ms=-1)
    for url, errcode in ((live, 0), (gone, 300001)):
        async with http.post(url, json=markdown) as resp:
            assert resp.status == 200 and (await resp.json())["errcode"] == errcode
    assert [m["text"] for m in fake.sent()] == ["hi"]


async def test_a_session_webhook_body_over_20000_bytes_is_refused(
    fake: FakeDingTalk, http: aiohttp.ClientSession
) -> None:
    """The observed limit (docs/dingtalk.md, "Limits"): 20,000 bytes pass, one more is refused."""
    url, _ = fake.session_webhook()
    empty = len(json.dumps({"msgtype": "markdown", "markdown": {"title": "t", "text": ""}}))
    for size, errcode in ((20_000, 0), (20_001, 40035)):
        text = "x" * (size - empty)
        body = json.dumps({"msgtype": "markdown", "markdown": {"title": "t", "text": text}})
        assert len(body.encode()) == size
        async with http.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
            assert r.status == 200 and (await r.json())["errcode"] == errcode
    assert [len(m["text"]) for m in fake.sent()] == [20_000 - empty]
