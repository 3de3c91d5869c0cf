"""Lark in the conformance suite: encrypted, signed webhook events (tests/support/lark.py) to an
in-process gateway, the answer read from the fake Lark's messages: the reply card's answer
element once its title says "Done", then the text messages replying to the same message."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from tests.fakes.lark import FakeLark
from tests.support.conformance.base import Answer, Harness, Sent
from tests.support.lark import (
    INTEGRATION,
    answer,
    bot_mention,
    lark_integration,
    message_event,
    reply_to,
    sealed,
)

_MARK = re.compile(r"\n\n\((\d+)/(\d+)\)$")


class LarkHarness(Harness):
    id = "lark"
    modes = ("patch", "cardkit")
    integration_id = INTEGRATION

    async def open(self) -> None:
        self.fake = FakeLark()
        await self.fake.start()

    async def shut(self) -> None:
        await self.fake.stop()

    def integration(self, **options: Any) -> dict[str, Any]:
        return lark_integration(self.fake, cardMode=self.mode, **options)

    def user_id(self, user: str) -> str:
        return f"ou_{user}"

    async def post(self, payload: dict[str, Any]) -> int:
        self.fake.receive(payload)
        body, headers = sealed(payload)
        url = f"http://127.0.0.1:{self.gateway.port}/api/lark/webhook/{INTEGRATION}"
        async with self.gateway.client.http.post(url, data=body, headers=headers) as resp:
            return resp.status

    async def send(self, text: str, *, user: str = "alice", group: bool = False) -> Sent:
        message_id = f"om_{uuid.uuid4().hex[:12]}"
        if group:
            event = message_event(
                f"@_user_1 {text}",
                chat_id="oc_group1",
                chat_type="group",
                sender=self.user_id(user),
                message_id=message_id,
                mentions=[bot_mention()],
            )
        else:
            event = message_event(
                text, chat_id=f"oc_p2p_{user}", sender=self.user_id(user), message_id=message_id
            )
        status = await self.post(event)
        assert status == 200, status
        return Sent(message_id, user, group)

    def seen(self, sent: Sent) -> Answer | None:
        replies = reply_to(self.fake, sent.id)
        cards = [m for m in replies if self.fake.messages[m]["msg_type"] == "interactive"]
        if not cards:
            return None
        card = self.fake.card_of(cards[0])
        if card["header"]["title"]["content"] != "Done":
            return None
        texts = [
            json.loads(self.fake.messages[m]["content"])["text"]
            for m in replies
            if self.fake.messages[m]["msg_type"] == "text"
        ]
        parts = [answer(card), *texts]
        last = _MARK.search(parts[-1])
        if last and len(parts) != int(last[2]):
            return None
        buttons = [str(b["text"]["content"]) for e in card["body"]["elements"] for b in _buttons(e)]
        return Answer(parts, buttons)

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
