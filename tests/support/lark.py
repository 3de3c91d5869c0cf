"""Lark test support: realistic event payloads, signed and encrypted webhook posts, and a
daemon wired to the fake Lark server."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from adapters.lark.crypto import EventCipher
from tests.fakes.lark import BOT_OPEN_ID, FakeLark
from tests.support.configs import base_config
from tests.support.platform import PlatformHarness

APP_ID = "cli_test"
TOKEN = "v_token_test"
ENCRYPT_KEY = "test key"
INTEGRATION = "lark-main"


def lark_integration(fake: FakeLark, **options: Any) -> dict[str, Any]:
    integ: dict[str, Any] = {
        "id": INTEGRATION,
        "platform": "lark",
        "xpertId": "echo",
        "appId": APP_ID,
        "appSecret": "secret",
        "verificationToken": TOKEN,
        "encryptKey": ENCRYPT_KEY,
        "apiBase": fake.base_url,
        "summaryWindowSeconds": 0,
        "maxWindowSeconds": 5,
        "updateIntervalMs": 100,
    }
    integ.update(options)
    return {k: v for k, v in integ.items() if v is not None}


def lark_config(prefix: str, fake: FakeLark, **options: Any) -> dict[str, Any]:
    config = base_config(prefix)
    config["integrations"] = [lark_integration(fake, **options)]
    return config


def message_event(
    text: str = "hello",
    *,
    chat_id: str = "oc_p2p1",
    chat_type: str = "p2p",
    sender: str = "ou_alice",
    message_id: str | None = None,
    event_id: str | None = None,
    mentions: list[dict[str, Any]] | None = None,
    message_type: str = "text",
    content: dict[str, Any] | None = None,
    token: str = TOKEN,
    sender_type: str = "user",
) -> dict[str, Any]:
    return {
        "schema": "2.0",
        "header": {
            "event_id": event_id or uuid.uuid4().hex,
            "event_type": "im.message.receive_v1",
            "create_time": str(int(time.time() * 1000)),
            "token": token,
            "app_id": APP_ID,
            "tenant_key": "tenant_test",
        },
        "event": {
            "sender": {
                "sender_id": {"open_id": sender, "union_id": "on_x", "user_id": None},
                "sender_type": sender_type,
                "tenant_key": "tenant_test",
            },
            "message": {
                "message_id": message_id or f"om_{uuid.uuid4().hex[:12]}",
                "root_id": None,
                "parent_id": None,
                "create_time": str(int(time.time() * 1000)),
                "chat_id": chat_id,
                "chat_type": chat_type,
                "message_type": message_type,
                "content": json.dumps(content if content is not None else {"text": text}),
                "mentions": mentions or [],
            },
        },
    }


def bot_mention(key: str = "@_user_1") -> dict[str, Any]:
    return {"key": key, "id": {"open_id": BOT_OPEN_ID}, "name": "Xpert", "tenant_key": "t"}


def card_click(
    value: dict[str, Any],
    *,
    message_id: str,
    chat_id: str = "oc_p2p1",
    event_id: str = "",
    operator: str = "ou_alice",
) -> dict[str, Any]:
    return {
        "schema": "2.0",
        "header": {
            "event_id": event_id or uuid.uuid4().hex,
            "event_type": "card.action.trigger",
            "token": TOKEN,
            "create_time": str(int(time.time() * 1000)),
            "app_id": APP_ID,
            "tenant_key": "tenant_test",
        },
        "event": {
            "operator": {"open_id": operator, "tenant_key": "tenant_test"},
            "token": "c-token",
            "action": {"tag": "button", "name": f"btn_{value['action']}", "value": value},
            "host": "im_message",
            "context": {"open_message_id": message_id, "open_chat_id": chat_id},
        },
    }


def sealed(
    payload: dict[str, Any] | bytes,
    *,
    key: str = ENCRYPT_KEY,
    timestamp: int | None = None,
    nonce: str = "n0nce",
    sign_key: str | None = None,
) -> tuple[bytes, dict[str, str]]:
    """Encrypt and sign like Lark does: ``{"encrypt": …}`` plus the three signature headers."""
    raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    body = json.dumps({"encrypt": EventCipher(key).encrypt(raw)}).encode()
    ts = str(int(time.time()) if timestamp is None else timestamp)
    signature = EventCipher(sign_key or key).signature(ts, nonce, body)
    headers = {
        "Content-Type": "application/json",
        "X-Lark-Request-Timestamp": ts,
        "X-Lark-Request-Nonce": nonce,
        "X-Lark-Signature": signature,
    }
    return body, headers


class LarkHarness(PlatformHarness[FakeLark]):
    """The fake Lark server plus an in-process daemon configured against it."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.gw.port}/api/lark/webhook/{INTEGRATION}"

    async def post_raw(self, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
        async with self.http.post(self.url, data=body, headers=headers) as resp:
            return resp.status, await resp.json(content_type=None)

    async def post(self, payload: dict[str, Any], **kw: Any) -> tuple[int, Any]:
        """Deliver ``payload`` as Lark would; a user's message is then known to the fake API
        (it can be replied to, reacted to, downloaded from)."""
        self.fake.receive(payload)
        return await self.post_raw(*sealed(payload, **kw))


# A slow echo: a run long enough to click its buttons while it works.
SLOW_ECHO = {"id": "echo", "kind": "echo", "stepDelayMs": 150, "charDelayMs": 25, "chunkChars": 1}


def reply_to(fake: FakeLark, message_id: str) -> list[str]:
    return [m["message_id"] for m in fake.messages.values() if m["parent_id"] == message_id]


def final_card(fake: FakeLark, message_id: str, title: str = "Done") -> Callable[[], Any]:
    def check() -> Any:
        replies = reply_to(fake, message_id)
        if len(replies) != 1:
            return None
        card = fake.card_of(replies[0])
        return card if card["header"]["title"]["content"] == title else None

    return check


def answer(card: dict[str, Any]) -> str:
    return next(e["content"] for e in card["body"]["elements"] if e.get("element_id") == "answer")


async def stored_keys(redis_client: aioredis.Redis, prefix: str) -> list[str]:
    return [
        k
        async for k in redis_client.scan_iter(match=f"{prefix}:*")
        if ":dedup" in k or ":burst" in k or ":turn" in k
    ]
