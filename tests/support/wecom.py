"""Driving the daemon as WeCom does: signed, encrypted callbacks built with wechatpy (the SDK,
not our adapter), and gateways wired to the fake WeCom server (tests/fakes/wecom.py).

Payload shapes: app callbacks are the encrypted XML of developer.work.weixin.qq.com/document/
path/90238 (messages) and 90240 (``template_card_event`` with ``ResponseCode``), encrypted as
90968 says (wechatpy's ``WeChatCrypto``); AI-bot callbacks are JSON ``{"encrypt": …}`` with an
empty receive-id (101033), messages as 100719 shows them (``chatid`` only in groups) and events
as 101027 does (``event.<eventtype>``, e.g. ``event.template_card_event``)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

import aiohttp
from wechatpy.crypto import PrpCrypto
from wechatpy.enterprise.crypto import WeChatCrypto

from tests.fakes.wecom import FakeWeCom
from tests.support.configs import base_config
from tests.support.helpers import InProcessGateway

# The official sample (docs/wecom.md, "Callback crypto").
TOKEN = "QDG6eK"
AES_KEY = "jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C"
CORP_ID = "wx5823bf96d3bd56c7"
SAMPLE_TIME = 1409659700.0
VERIFY = {
    "msg_signature": "5c45ff5e21c57e6ad56bac8758b79b1d9ac89fd3",
    "timestamp": "1409659589",
    "nonce": "263014780",
    "echostr": (
        "P9nAzCzyDtyTWESHep1vC5X9xho/qYX3Zpb4yKa9SKld1DsH3Iyt3tP3zNdtp+4RPcs8TgAE7OaBO+FZXvnaqQ=="
    ),
}
SAMPLE_QUERY = {
    "msg_signature": "477715d11cdb4164915debcba66cb864d751f3e6",
    "timestamp": "1409659813",
    "nonce": "1372623149",
}
SAMPLE_ENCRYPT = (
    "RypEvHKD8QQKFhvQ6QleEB4J58tiPdvo+rtK1I9qca6aM/wvqnLSV5zEPeusUiX5L5X/0lWfrf0QADHHhGd3QczcdCUp"
    "j911L3vg3W/sYYvuJTs3TUUkSUXxaccAS0qhxchrRYt66wiSpGLYL42aM6A8dTT+6k4aSknmPj48kzJs8qLjvd4Xgpue"
    "06DOdnLxAUHzM6+kDZ+HMZfJYuR+LtwGc2hgf5gsijff0ekUNXZiqATP7PF5mZxZ3Izoun1s4zG4LUMnvw2r+KqCKIw+"
    "3IQH03v+BCA9nMELNqbSf6tiWSrXJB3LAVGUcallcrw8V2t9EL4EhzJWrQUax5wLVMNS0+rUPA3k22Ncx4XXZS9o0MBH"
    "27Bo6BpNelZpS+/uh9KsNlY6bHCmJU9p8g7m3fVKn28H3KDYA5Pl/T8Z1ptDAVe0lXdQ2YoyyH2uyPIGHBZZIs2pDBS8"
    "R07+qN+E7Q=="
)
SAMPLE_BODY = (
    f"<xml><ToUserName><![CDATA[{CORP_ID}]]></ToUserName><AgentID>218</AgentID>"
    f"<Encrypt><![CDATA[{SAMPLE_ENCRYPT}]]></Encrypt></xml>"
)
ECHO_FAST = {"id": "echo", "kind": "echo", "stepDelayMs": 5, "charDelayMs": 0, "chunkChars": 50}
ECHO_SLOW = {"id": "echo", "kind": "echo", "stepDelayMs": 300, "charDelayMs": 40, "chunkChars": 2}


def integration(fake: FakeWeCom, mode: str = "app", **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "wc",
        "platform": "wecom",
        "xpertId": "echo",
        "connectionMode": mode,
        "token": TOKEN,
        "encodingAesKey": AES_KEY,
        "corpId": CORP_ID,
        "agentId": 218,
        "corpSecret": fake.secret,
        "botId": fake.bot_id,
        "botSecret": fake.bot_secret,
        "apiBase": fake.base_url,
        "wsUrl": fake.ws_url,
        "summaryWindowSeconds": 0,
        "updateIntervalMs": 100,
    }
    if mode != "app":
        base.pop("agentId")
        base.pop("corpSecret")
    base.update(extra)
    return base


async def start_gateway(
    prefix: str,
    fake: FakeWeCom,
    mode: str = "app",
    *,
    expert: dict[str, Any] | None = None,
    clock: float | None = None,
    runtime: dict[str, Any] | None = None,
    **extra: Any,
) -> InProcessGateway:
    config = base_config(prefix)
    config["runtime"].update(runtime or {})
    config["experts"] = [expert or ECHO_FAST]
    config["integrations"] = [integration(fake, mode, **extra)]
    gw = InProcessGateway(config)
    await gw.start()
    await control_subscribed(gw)
    if clock is not None:
        gw.gateway.adapters["wc"].clock = lambda: clock  # type: ignore[attr-defined]
    return gw


async def control_subscribed(gw: InProcessGateway) -> None:
    """Wait for the replica's control-channel subscription: a gateway stopped while it is
    still subscribing can hang in shutdown (a core race; see the adapter's report)."""
    store = gw.gateway.store
    channels = store.control_channels()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if all(await store.pubsub.subscribers(channels)):
            return
        await asyncio.sleep(0.02)


def url(gw: InProcessGateway, integration_id: str = "wc") -> str:
    return f"http://127.0.0.1:{gw.port}/api/wecom/webhook/{integration_id}"


def app_message(user: str, text: str, msg_id: str, create_time: int | None = None) -> str:
    return (
        f"<xml><ToUserName><![CDATA[{CORP_ID}]]></ToUserName>"
        f"<FromUserName><![CDATA[{user}]]></FromUserName>"
        f"<CreateTime>{create_time or int(time.time())}</CreateTime>"
        f"<MsgType><![CDATA[text]]></MsgType><Content><![CDATA[{text}]]></Content>"
        f"<MsgId>{msg_id}</MsgId><AgentID>218</AgentID></xml>"
    )


def card_click(user: str, key: str, task_id: str, response_code: str, create_time: int) -> str:
    return (
        f"<xml><ToUserName><![CDATA[{CORP_ID}]]></ToUserName>"
        f"<FromUserName><![CDATA[{user}]]></FromUserName><CreateTime>{create_time}</CreateTime>"
        "<MsgType><![CDATA[event]]></MsgType><Event><![CDATA[template_card_event]]></Event>"
        f"<EventKey><![CDATA[{key}]]></EventKey><TaskId><![CDATA[{task_id}]]></TaskId>"
        "<CardType><![CDATA[button_interaction]]></CardType>"
        f"<ResponseCode><![CDATA[{response_code}]]></ResponseCode><AgentID>218</AgentID></xml>"
    )


def encrypt_xml(
    plain: str,
    *,
    corp_id: str = CORP_ID,
    token: str = TOKEN,
    timestamp: int | None = None,
    nonce: str = "n0nce",
) -> tuple[dict[str, str], str]:
    """(query, body) of an app callback, as WeCom sends it."""
    ts = str(timestamp or int(time.time()))
    reply = WeChatCrypto(token, AES_KEY, corp_id).encrypt_message(plain, nonce, ts)
    encrypt = reply.split("<Encrypt><![CDATA[")[1].split("]]>")[0]
    signature = reply.split("<MsgSignature><![CDATA[")[1].split("]]>")[0]
    body = (
        f"<xml><ToUserName><![CDATA[{CORP_ID}]]></ToUserName><AgentID>218</AgentID>"
        f"<Encrypt><![CDATA[{encrypt}]]></Encrypt></xml>"
    )
    return {"msg_signature": signature, "timestamp": ts, "nonce": nonce}, body


def encrypt_json(message: dict[str, Any], *, receive_id: str = "") -> tuple[dict[str, str], str]:
    """(query, body) of an AI-bot callback: JSON ``{"encrypt": …}``, receive-id ""."""
    from wechatpy.crypto import _get_signature

    key = base64.b64decode(AES_KEY + "=")
    encrypt = PrpCrypto(key).encrypt(json.dumps(message), receive_id).decode()
    ts, nonce = str(int(time.time())), "n1"
    query = {
        "msg_signature": _get_signature(TOKEN, ts, nonce, encrypt),
        "timestamp": ts,
        "nonce": nonce,
    }
    return query, json.dumps({"encrypt": encrypt})


def decrypt_reply(body: str) -> dict[str, Any]:
    """An AI-bot passive reply, checked (signature) and decrypted with the SDK."""
    from wechatpy.crypto import _get_signature

    data = json.loads(body)
    assert (
        _get_signature(TOKEN, str(data["timestamp"]), data["nonce"], data["encrypt"])
        == data["msgsignature"]
    )
    key = base64.b64decode(AES_KEY + "=")
    plain: dict[str, Any] = json.loads(PrpCrypto(key).decrypt(data["encrypt"], ""))
    return plain


async def post(
    http: aiohttp.ClientSession, target: str, query: dict[str, str], body: str
) -> tuple[int, str]:
    async with http.post(target, params=query, data=body.encode()) as resp:
        return resp.status, await resp.text()


def aibot_message(
    msg_id: str, msgtype: str, body: dict[str, Any], *, user: str = "alice", **extra: Any
) -> dict[str, Any]:
    """An AI-bot message in a direct chat (a callback's body or a long-connection frame's;
    doc 100719, aibot-node-sdk src/types/message.ts)."""
    return {
        "msgid": msg_id,
        "aibotid": "aib-1",
        "chattype": "single",
        "from": {"userid": user},
        "msgtype": msgtype,
        msgtype: body,
        **extra,
    }


def aibot_click(msg_id: str, event_key: str, task_id: str) -> dict[str, Any]:
    """alice's click on a template card button of the AI bot, nested as doc 101027 shows it
    (the node SDK's types put ``event_key``/``task_id`` on ``event`` itself; test_ws_link.py
    sends that shape too)."""
    event = {"event_key": event_key, "task_id": task_id}
    return aibot_message(
        msg_id, "event", {"eventtype": "template_card_event", "template_card_event": event}
    )
