"""Mini in the conformance suite (tests/conformance/), found there by this module's place: signed
webhook events to an in-process gateway, the answer read from the fake's messages: the card
replying to the user's message once it says done, then the text parts after it (mode
``cards``); only text parts (mode ``texts``). Mini's entry
point is on ``sys.path`` from ``open`` to ``shut``."""

from __future__ import annotations

import importlib
import json
import re
import sys
from dataclasses import asdict
from typing import Any

from tests.platforms.mini.adapter.outbound import ROOM
from tests.platforms.mini.fake import FakeMini
from tests.platforms.mini.harness import (
    ENTRY_POINT,
    INTEGRATION,
    click_event,
    message_event,
    mini_integration,
    signed,
)
from tests.support.conformance.base import Answer, Harness, NoButton, Sent

_MARK = re.compile(r"\n\n\((\d+)/(\d+)\)$")


class MiniConformance(Harness):
    id = "mini"
    platform = "mini"
    modes = ("cards", "texts")
    integration_id = INTEGRATION

    async def open(self) -> None:
        self.fake = FakeMini()
        await self.fake.start()
        sys.path.insert(0, str(ENTRY_POINT))  # last: nothing after it can fail before shut
        importlib.invalidate_caches()

    async def shut(self) -> None:
        sys.path.remove(str(ENTRY_POINT))
        await self.fake.stop()

    def integration(self, **options: Any) -> dict[str, Any]:
        # The suite turns the directory lookup off by the key the other platforms share; Mini
        # has no directory (no Capability.SENDER_EMAIL), so no such key: nothing to turn off.
        if options.get("lookupSenderEmail") is False:
            del options["lookupSenderEmail"]
        return mini_integration(self.fake, **{"answers": self.mode, **options})

    async def send(self, text: str, *, user: str = "alice", group: bool = False) -> Sent:
        chat = "c-group" if group else f"c-dm-{user}"
        event = message_event(
            text, chat=chat, chat_type="group" if group else "dm", user=user, mentioned=group
        )
        body, headers = signed(event)
        url = f"http://127.0.0.1:{self.gateway.port}/api/mini/webhook/{INTEGRATION}"
        async with self.gateway.client.http.post(url, data=body, headers=headers) as resp:
            assert resp.status == 200, resp.status
        return Sent(event["messageId"], user, group)

    def seen(self, sent: Sent) -> Answer | None:
        replies = self.fake.replies_to(sent.id)
        texts = [m.text for m in replies if m.card is None]
        cards = [m.card for m in replies if m.card is not None]
        title = ""
        if self.mode == "texts":
            parts, buttons = texts, []
        elif cards and cards[0]["status"] != "running":  # final, or waiting for an answer
            parts = [str(cards[0]["text"]), *texts]
            buttons = [str(b["label"]) for b in cards[0]["buttons"]]
            title = str(cards[0]["title"])
        else:
            return None
        last = _MARK.search(parts[-1]) if parts else None
        if not parts or (last and len(parts) != int(last[2])):
            return None
        return Answer(parts, buttons, title)

    async def click(self, sent: Sent, label: str, *, user: str | None = None) -> tuple[Sent, str]:
        """A click on the button ``label`` of the card answering ``sent``, as the card showed
        it last with that button; what follows replies to the card."""
        [card] = [m for m in self.fake.replies_to(sent.id) if m.card is not None][:1]
        try:
            event = click_event(card, label, user=user or sent.user, by="label")
        except LookupError:
            raise NoButton(label) from None
        body, headers = signed(event)
        url = f"http://127.0.0.1:{self.gateway.port}/api/mini/webhook/{INTEGRATION}"
        async with self.gateway.client.http.post(url, data=body, headers=headers) as resp:
            assert resp.status == 200, resp.status
            answer = await resp.json()
        return Sent(card.id, user or sent.user, sent.group), str(answer.get("toast", ""))

    def shown(self) -> list[str]:
        return [
            m.text if m.card is None else str(m.card["text"]) for m in self.fake.messages.values()
        ]

    def part_bytes(self) -> int | None:
        """Mini takes no file (the adapter declares no part size): a part is what a text
        holds."""
        return ROOM.size

    def written(self) -> str:
        return json.dumps([asdict(m) for m in self.fake.messages.values()], ensure_ascii=False)

    def refused(self) -> list[str]:
        return [f"{endpoint}: {status}" for endpoint, status in self.fake.answers if status != 200]
