"""The Mini platform's harness: its entry point put on ``sys.path`` (``installed``), the
integration's config against the fake, signed events posted as Mini posts them, and the cards
the fake was sent."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.platforms.mini.adapter.inbound import signature
from tests.platforms.mini.fake import BOT_TOKEN, FakeMini, Message
from tests.support.configs import base_config
from tests.support.platform import PlatformHarness
from tests.support.waits import eventually

ENTRY_POINT = Path(__file__).resolve().parent / "entry_point"
SECRET = "mini-signing-secret"
INTEGRATION = "mini-main"


def installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mini's distribution on ``sys.path`` for this test (its entry point found as pip would
    find it); a gateway subprocess needs ``PYTHONPATH=ENTRY_POINT`` instead."""
    monkeypatch.syspath_prepend(str(ENTRY_POINT))


def mini_integration(fake: FakeMini, **options: Any) -> dict[str, Any]:
    integ: dict[str, Any] = {
        "id": INTEGRATION,
        "platform": "mini",
        "xpertId": "echo",
        "apiBase": fake.base_url,
        "botToken": BOT_TOKEN,
        "signingSecret": SECRET,
        "summaryWindowSeconds": 0,
        "maxWindowSeconds": 5,
        "updateIntervalMs": 100,
    }
    integ.update(options)
    return {k: v for k, v in integ.items() if v is not None}


def mini_config(prefix: str, fake: FakeMini, **options: Any) -> dict[str, Any]:
    config = base_config(prefix)
    config["integrations"] = [mini_integration(fake, **options)]
    return config


def signed(
    event: dict[str, Any] | bytes, *, secret: str = SECRET, timestamp: int | None = None
) -> tuple[bytes, dict[str, str]]:
    """The body and headers Mini sends ``event`` with."""
    body = event if isinstance(event, bytes) else json.dumps(event).encode()
    ts = str(int(time.time()) if timestamp is None else timestamp)
    headers = {
        "Content-Type": "application/json",
        "X-Mini-Timestamp": ts,
        "X-Mini-Signature": signature(secret, ts, body),
    }
    return body, headers


def message_event(
    text: str,
    *,
    chat: str = "c-dm-alice",
    chat_type: str = "dm",
    user: str = "alice",
    mentioned: bool = False,
) -> dict[str, Any]:
    return {
        "type": "message", "id": f"ev-{uuid.uuid4().hex[:12]}", "chat": chat,
        "chatType": chat_type, "user": user, "userName": user.title(),
        "messageId": f"um-{uuid.uuid4().hex[:12]}", "text": text, "mentioned": mentioned,
    }  # fmt: skip


def click_event(
    message: Message, button: str, *, user: str = "alice", by: str = "action"
) -> dict[str, Any]:
    """A click on ``message``'s button whose action (or, ``by="label"``, label) is ``button``,
    as the newest of the card's versions with that button showed it."""
    values = [
        b["value"]
        for card in reversed(message.versions)
        for b in card["buttons"]
        if (b["value"]["action"] if by == "action" else b["label"]) == button
    ]
    if not values:
        raise LookupError(f"no button {button!r} on {message.id}")
    value = values[0]
    return {
        "type": "click", "id": f"ev-{uuid.uuid4().hex[:12]}", "chat": message.chat,
        "chatType": value["chatType"] if value["chatType"] == "group" else "dm", "user": user,
        "messageId": message.id, "value": value,
    }  # fmt: skip


class MiniHarness(PlatformHarness[FakeMini]):
    @property
    def url(self) -> str:
        return f"{self.base}/api/mini/webhook/{INTEGRATION}"

    async def post_raw(self, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
        async with self.http.post(self.url, data=body, headers=headers) as resp:
            return resp.status, await resp.json(content_type=None)

    async def post(self, event: dict[str, Any], **kw: Any) -> tuple[int, Any]:
        return await self.post_raw(*signed(event, **kw))

    async def say(self, text: str, **kw: Any) -> dict[str, Any]:
        """A user's message, posted and accepted; the event."""
        event = message_event(text, **kw)
        status, answer = await self.post(event)
        assert status == 200 and answer["ok"], (status, answer)
        return event

    async def card(self, event: dict[str, Any], status: str = "done") -> Message:
        """The one card answering ``event``, once it shows ``status``."""

        def check() -> Message | None:
            cards = [m for m in self.fake.replies_to(event["messageId"]) if m.card is not None]
            shown = cards[0].card if len(cards) == 1 else None
            return cards[0] if shown is not None and shown["status"] == status else None

        found: Message = await eventually(check)
        return found
