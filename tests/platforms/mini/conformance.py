"""Mini in the conformance suite (tests/conformance/), found there by this module's place: signed
webhook events to an in-process gateway, the answer read from the fake's messages: the card
replying to the user's message once it says done, then the text parts after it (mode
``cards``); only text parts (mode ``texts``). Mini's entry point is on ``sys.path`` from
``open`` to ``shut``. The fake keeps no limits until ``limit_fake``; an answer's calls are paced
(``PACED``) in both modes, its card (or first text) sent through ``send``."""

from __future__ import annotations

import importlib
import json
import re
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import aiohttp

from tests.platforms.mini.adapter.outbound import ROOM
from tests.platforms.mini.fake import (
    BOT_TOKEN,
    CALLS_PER_SECOND,
    CHAT_SENDS_PER_SECOND,
    FakeMini,
)
from tests.platforms.mini.harness import (
    ENTRY_POINT,
    INTEGRATION,
    click_event,
    message_event,
    mini_integration,
    signed,
)
from tests.support.conformance.base import Answer, Harness, NoButton, Sent, Webhook

_MARK = re.compile(r"\n\n\((\d+)/(\d+)\)$")
_REST_S = 1  # the Retry-After of the throttle answer ``throttle_next`` sets up


class MiniConformance(Harness):
    id = "mini"
    platform = "mini"
    modes = ("cards", "texts")
    integration_id = INTEGRATION
    _card = ""  # the card ``call_api("a")`` updates, once seeded

    async def open(self) -> None:
        self.fake = FakeMini()
        await self.fake.start()
        sys.path.insert(0, str(ENTRY_POINT))  # last: nothing after it can fail before shut
        importlib.invalidate_caches()

    async def shut(self) -> None:
        sys.path.remove(str(ENTRY_POINT))
        await self.fake.stop()

    def integration(self, **options: Any) -> dict[str, Any]:
        return mini_integration(self.fake, **{"answers": self.mode, **options})

    async def send(self, text: str, *, user: str = "alice", group: bool = False) -> Sent:
        chat = _chat(user, group)
        event = message_event(
            text, chat=chat, chat_type="group" if group else "dm", user=user, mentioned=group
        )
        body, headers = signed(event)
        url = f"http://127.0.0.1:{self.gateway.port}/api/mini/webhook/{INTEGRATION}"
        async with self.gateway.client.http.post(url, data=body, headers=headers) as resp:
            assert resp.status == 200, resp.status
        return Sent(event["messageId"], user, group)

    def webhook(self, payload: bytes) -> Webhook | None:
        body, headers = signed(payload)
        return Webhook(f"/api/mini/webhook/{INTEGRATION}", {}, headers, body)

    def misshapen(self) -> list[bytes]:
        wrong_text, wrong_user = message_event("x"), message_event("x")
        wrong_text["text"], wrong_user["user"] = 5, ["alice"]
        return [json.dumps(wrong_text).encode(), json.dumps(wrong_user).encode()]

    def forged(self) -> dict[str, tuple[Webhook, int]]:
        event = message_event("forged", chat=_chat("mallory", False), user="mallory")
        path = f"/api/mini/webhook/{INTEGRATION}"
        wrong, wrong_headers = signed(event, secret="not-the-secret")
        stale, stale_headers = signed(event, timestamp=int(time.time()) - 3600)
        body, headers = signed(event)
        unsigned = {k: v for k, v in headers.items() if not k.startswith("X-Mini")}
        return {
            "wrong signature": (Webhook(path, {}, wrong_headers, wrong), 401),
            "stale timestamp": (Webhook(path, {}, stale_headers, stale), 401),
            "unsigned": (Webhook(path, {}, unsigned, body), 401),
        }

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
        return [f"{c.endpoint}: {c.status}" for c in self.fake.answers if c.status != 200]

    def chat_id(self, sent: Sent) -> str:
        return _chat(sent.user, sent.group)

    # --- the fake's limits ----------------------------------------------------------------------
    def fake_figures(self) -> dict[str, int]:
        return {
            "calls_per_second": CALLS_PER_SECOND,
            "chat_sends_per_second": CHAT_SENDS_PER_SECOND,
        }

    async def limit_fake(
        self,
        clock: Callable[[], float] | None = None,
        *,
        per_api: int | None = None,
    ) -> float:
        """A fake keeping Mini's limits in a whole second (not the forgiving 0.9 s of Mini's own
        tests), on ``clock``, ``per_api`` calls of one API in it."""
        await self.fake.stop()
        figures = {"calls_per_second": per_api} if per_api is not None else {}
        clocked = {"clock": clock} if clock is not None else {}
        self.fake = FakeMini(limited=True, window_ms=1000.0, **figures, **clocked)
        await self.fake.start()
        return 1000.0

    async def call_api(self, api: str) -> str:
        """``a``: an update of a card already in chat ``c-a``; ``b``: a message to chat ``c-b``
        (another API); ``chat:<id>``: a message to that chat."""
        headers = {"Authorization": f"Bearer {BOT_TOKEN}"}
        async with aiohttp.ClientSession(base_url=self.fake.base_url, headers=headers) as http:
            if api == "a":
                if not self._card:
                    self._card = self.fake.seed_card("c-a")
                call = http.put(f"/v1/messages/{self._card}", json={"card": {"text": "hi"}})
            else:
                chat = "c-b" if api == "b" else api.removeprefix("chat:")
                body = {"chat": chat, "key": uuid.uuid4().hex, "text": "hi"}
                call = http.post("/v1/messages", json=body)
            async with call as r:
                status, data = r.status, await r.json()
        if status == 200:
            return "ok"
        return "throttled" if status == 429 else f"refused {status} {data.get('error')}"

    def throttles(self) -> list[str]:
        return [f"{c.endpoint} {c.status}" for c in self.fake.answers if c.status == 429]

    def throttle_next(self) -> float:
        """The answer's first call, its card's (or first text's) send, gets a 429 with
        ``Retry-After: 1``."""
        self.fake.throttle_next("send", _REST_S)
        return float(_REST_S)

    def after_throttle(self) -> float | None:
        sends = [c for c in self.fake.answers if c.endpoint == "send"]
        refused = [c.at for c in sends if c.status == 429]
        served = [c.at for c in sends if c.status == 200 and refused and c.at > refused[-1]]
        return min(served) - refused[-1] if served else None


def _chat(user: str, group: bool) -> str:
    return "c-group" if group else f"c-dm-{user}"
