"""Lark in the conformance suite: encrypted, signed webhook events (tests/support/lark.py) to an
in-process gateway, the answer read from the fake Lark's messages: the reply card's answer
element once its title says "Done", then the text messages replying to the same message."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from gateway.progress import STATUS_TITLES
from tests.fakes.lark import FakeLark
from tests.support.conformance.base import Answer, Harness, NoButton, Sent
from tests.support.lark import (
    INTEGRATION,
    answer,
    bot_mention,
    card_click,
    lark_integration,
    message_event,
    reply_to,
    sealed,
)

_MARK = re.compile(r"\n\n\((\d+)/(\d+)\)$")


class LarkHarness(Harness):
    id = "lark"
    platform = "lark"
    modes = ("patch", "cardkit")
    integration_id = INTEGRATION

    async def open(self) -> None:
        self._buttons: dict[str, dict[str, dict[str, Any]]] = {}
        self.fake = FakeLark()
        await self.fake.start()

    async def shut(self) -> None:
        await self.fake.stop()

    def integration(self, **options: Any) -> dict[str, Any]:
        return lark_integration(self.fake, cardMode=self.mode, **options)

    def user_id(self, user: str) -> str:
        return f"ou_{user}"

    async def post(self, payload: dict[str, Any]) -> tuple[int, Any]:
        """Deliver ``payload`` as Lark does (encrypted, signed); a user's message is then known
        to the fake API (it can be replied to, downloaded from)."""
        self.fake.receive(payload)
        body, headers = sealed(payload)
        url = f"http://127.0.0.1:{self.gateway.port}/api/lark/webhook/{INTEGRATION}"
        async with self.gateway.client.http.post(url, data=body, headers=headers) as resp:
            return resp.status, await resp.json(content_type=None)

    def chat_of(self, user: str, group: bool) -> str:
        return "oc_group1" if group else f"oc_p2p_{user}"

    async def send(self, text: str, *, user: str = "alice", group: bool = False) -> Sent:
        message_id = f"om_{uuid.uuid4().hex[:12]}"
        chat = self.chat_of(user, group)
        if group:
            event = message_event(
                f"@_user_1 {text}",
                chat_id=chat,
                chat_type="group",
                sender=self.user_id(user),
                message_id=message_id,
                mentions=[bot_mention()],
            )
        else:
            event = message_event(
                text, chat_id=chat, sender=self.user_id(user), message_id=message_id
            )
        status, _ = await self.post(event)
        assert status == 200, status
        return Sent(message_id, user, group)

    async def send_file(
        self, data: bytes | None, name: str, *, user: str = "alice", group: bool = False
    ) -> Sent:
        message_id, key = f"om_{uuid.uuid4().hex[:12]}", f"file_v3_{uuid.uuid4().hex[:8]}"
        if data is None:
            self.fake.fail("resource", status=400, code=234003, times=5)  # File not in message.
        else:  # Lark serves a file's bytes without saying what they are: the name tells.
            self.fake.resources[key] = (data, "application/octet-stream")
        event = message_event(
            message_id=message_id,
            message_type="file",
            content={"file_key": key, "file_name": name},
            chat_id=self.chat_of(user, group),
            chat_type="group" if group else "p2p",
            sender=self.user_id(user),
        )
        status, _ = await self.post(event)
        assert status == 200, status
        return Sent(message_id, user, group, {"name": name})

    def fetched(self) -> list[str]:
        calls = self.fake.of("resource")
        for call in calls:  # a message's resource, of type file
            assert call.path.startswith("/open-apis/im/v1/messages/om_") and call.query == {
                "type": "file"
            }, call
        return [c.path for c in calls]

    def _card_message(self, sent: Sent) -> str | None:
        replies = reply_to(self.fake, sent.id)
        cards = [m for m in replies if self.fake.messages[m]["msg_type"] == "interactive"]
        return cards[0] if cards else None

    def seen(self, sent: Sent) -> Answer | None:
        card_message = self._card_message(sent)
        if card_message is None:
            return None
        card = self.fake.card_of(card_message)
        title = card["header"]["title"]["content"]
        if title == STATUS_TITLES["running"]:
            return None
        texts = [
            json.loads(self.fake.messages[m]["content"])["text"]
            for m in reply_to(self.fake, sent.id)
            if self.fake.messages[m]["msg_type"] == "text"
        ]
        parts = [answer(card), *texts]
        last = _MARK.search(parts[-1])
        if last and len(parts) != int(last[2]):
            return None
        buttons = [str(b["text"]["content"]) for e in card["body"]["elements"] for b in _buttons(e)]
        return Answer(parts, buttons, title)

    async def click(self, sent: Sent, label: str, *, user: str | None = None) -> tuple[Sent, str]:
        card_message = self._card_message(sent)
        assert card_message is not None, "no card to click"
        # A card's buttons as first seen: a stale card's buttons can still be clicked.
        known = self._buttons.setdefault(card_message, {})
        card = self.fake.card_of(card_message)
        for element in card["body"]["elements"]:
            for b in _buttons(element):
                known.setdefault(str(b["text"]["content"]), b)
        button = known.get(label)
        if button is None:
            raise NoButton(label)
        who = user or sent.user
        click = card_click(
            button["behaviors"][0]["value"],
            message_id=card_message,
            chat_id=self.chat_of(sent.user, sent.group),
            operator=self.user_id(who),
        )
        status, body = await self.post(click)
        assert status == 200, (status, body)
        if isinstance(body, dict) and body.get("card"):
            self.fake.apply_callback(card_message, body)
        toast = (body or {}).get("toast", {}).get("content", "") if isinstance(body, dict) else ""
        return Sent(card_message, who, sent.group), str(toast)

    def shown(self) -> list[str]:
        out: list[str] = []
        for m in self.fake.messages.values():
            if not m["from_bot"]:
                continue
            if m["msg_type"] == "text":
                out.append(json.loads(m["content"])["text"])
            elif m["msg_type"] == "interactive":
                out.append(json.dumps(self.fake.card_of(m["message_id"]), ensure_ascii=False))
        return out

    def files(self) -> list[tuple[str, bytes]]:
        """``file`` messages of files uploaded as ``stream`` (im/v1/files: any other type)."""
        out: list[tuple[str, bytes]] = []
        for m in self.fake.messages.values():
            if m["from_bot"] and m["msg_type"] == "file":
                data, file_type, name = self.fake.files[json.loads(m["content"])["file_key"]]
                assert file_type == "stream", file_type
                out.append((name, data))
        return out

    def member(self, user: str, email: str, *, work_address: bool = False) -> None:
        open_id = self.user_id(user)
        self.fake.users[open_id] = {"open_id": open_id, "email": email}

    def lookups(self) -> list[str]:
        return [c.path.rsplit("/", 1)[-1] for c in self.fake.of("user")]

    def written(self) -> str:
        return json.dumps([c.body for c in self.fake.calls], ensure_ascii=False)

    def refused(self) -> list[str]:
        return [f"{r}" for r in self.fake.refusals if "/contact/" not in r[0]]


def _buttons(element: dict[str, Any]) -> list[dict[str, Any]]:
    if element.get("tag") == "button":
        return [element]
    found: list[dict[str, Any]] = []
    for key in ("elements", "columns", "actions"):
        for child in element.get(key) or []:
            found += _buttons(child)
    return found
