"""Lark in the conformance suite: encrypted, signed webhook events (tests/support/lark.py) to an
in-process gateway, the answer read from the fake Lark's messages: the reply card's answer
element once its title says "Done", then the text messages replying to the same message."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp

from gateway.progress import STATUS_TITLES
from tests.fakes.lark import APP_SECRET, FakeLark
from tests.fakes.limits import LARK_THROTTLE_CODES, LarkLimits
from tests.support.conformance.base import Answer, Harness, Media, NoButton, Sent, Webhook
from tests.support.lark import (
    APP_ID,
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
_IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


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

    def webhook(self, payload: bytes) -> Webhook | None:
        body, headers = sealed(payload)
        return Webhook(f"/api/lark/webhook/{INTEGRATION}", {}, headers, body)

    def misshapen(self) -> list[bytes]:
        wrong_chat, wrong_content = message_event("x"), message_event("x")
        wrong_chat["event"]["message"]["chat_id"] = 5
        wrong_content["event"]["message"]["content"] = {"text": "not a JSON string"}
        return [json.dumps(wrong_chat).encode(), json.dumps(wrong_content).encode()]

    def forged(self) -> dict[str, tuple[Webhook, int]]:
        event = message_event(
            "forged", chat_id=self.chat_of("mallory", False), sender=self.user_id("mallory")
        )
        path = f"/api/lark/webhook/{INTEGRATION}"
        wrong, wrong_headers = sealed(event, sign_key="not the encrypt key")
        stale, stale_headers = sealed(event, timestamp=int(time.time()) - 3600)
        bare, headers = sealed(event)
        unsigned = {k: v for k, v in headers.items() if not k.startswith("X-Lark")}
        return {
            "wrong signature": (Webhook(path, {}, wrong_headers, wrong), 401),
            "stale timestamp": (Webhook(path, {}, stale_headers, stale), 401),
            "unsigned": (Webhook(path, {}, unsigned, bare), 401),
        }

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

    def media(self, sent: Sent) -> Media:
        """The card's images by the image_key of their upload, then the file messages that
        reply to the same message."""
        card_message = self._card_message(sent)
        if card_message is None:
            return Media()
        shown = answer(self.fake.card_of(card_message))
        images = [self.fake.images[k][0] for k in _IMAGE.findall(shown) if k in self.fake.images]
        files = []
        for m in reply_to(self.fake, sent.id):
            if self.fake.messages[m]["msg_type"] == "file":
                data, _, name = self.fake.files[
                    json.loads(self.fake.messages[m]["content"])["file_key"]
                ]
                files.append((name, data))
        return Media(images, files)

    def refuse_uploads(self) -> bool:
        self.fake.fail("image_upload", status=400, code=234001, times=1000)
        return True

    def fake_figures(self) -> dict[str, int]:
        limits = LarkLimits()
        return {
            "calls_per_second": limits.api_second.limit,
            "calls_per_minute": limits.api_minute.limit,
            "chat_sends_per_second": limits.chat.limit,
        }

    async def limit_fake(
        self,
        clock: Callable[[], float] | None = None,
        *,
        per_api: int | None = None,
    ) -> float:
        figures = {"per_second": per_api} if per_api is not None else {}
        await self.fake.stop()
        self.fake = FakeLark(limits=LarkLimits(clock, **figures))
        await self.fake.start()
        self._token = ""
        return 1000.0

    async def call_api(self, api: str) -> str:
        """``a``: the bot's info; ``b`` (a message to a chat) and ``chat:<id>``: a message."""
        async with aiohttp.ClientSession(base_url=self.fake.base_url) as http:
            if not getattr(self, "_token", ""):
                body = {"app_id": APP_ID, "app_secret": APP_SECRET}
                async with http.post(
                    "/open-apis/auth/v3/tenant_access_token/internal", json=body
                ) as r:
                    self._token = (await r.json())["tenant_access_token"]
            headers = {"Authorization": f"Bearer {self._token}"}
            if api == "a":
                call = http.get("/open-apis/bot/v3/info", headers=headers)
            else:
                chat = "oc_b" if api == "b" else api.removeprefix("chat:")
                body = {
                    "receive_id": chat,
                    "msg_type": "text",
                    "content": json.dumps({"text": "hi"}),
                }
                query = {"receive_id_type": "chat_id"}
                call = http.post(
                    "/open-apis/im/v1/messages", json=body, params=query, headers=headers
                )
            async with call as r:
                status, code = r.status, (await r.json()).get("code")
        if status == 200 and code == 0:
            return "ok"
        return "throttled" if code in LARK_THROTTLE_CODES else f"refused {status} {code}"

    def throttles(self) -> list[str]:
        if self.fake.limits is None:
            return [f"{p} {c}" for p, c in self.fake.refusals if c in LARK_THROTTLE_CODES]
        return [f"{a.api} {a.status} {a.code}" for a in self.fake.limits.throttled()]

    def throttle_next(self) -> float:
        self.fake.fail("reply", code=99991400, reset=1)  # 429, x-ogw-ratelimit-reset: 1
        return 1.0

    def after_throttle(self) -> float | None:
        assert self.fake.limits is not None, "limit_fake() first"
        replies = [a for a in self.fake.limits.answers if a.api.endswith("/reply")]
        refused = [a.at_ms for a in replies if a.status == 429]
        served = [a.at_ms for a in replies if a.status < 300 and refused and a.at_ms > refused[-1]]
        return min(served) - refused[-1] if served else None

    def chat_id(self, sent: Sent) -> str:
        return self.chat_of(sent.user, sent.group)

    def chat_files(self) -> list[tuple[str, bytes]]:
        out = []
        for m in self.fake.messages.values():
            if m["from_bot"] and m["msg_type"] == "file":
                data, _, name = self.fake.files[json.loads(m["content"])["file_key"]]
                out.append((name, data))
        return out

    def seat_members(self, sent: Sent, names: list[str]) -> None:
        members = [{"member_id": self.user_id(n), "name": n} for n in names]
        self.fake.members[self.chat_of(sent.user, sent.group)] = members


def _buttons(element: dict[str, Any]) -> list[dict[str, Any]]:
    if element.get("tag") == "button":
        return [element]
    found: list[dict[str, Any]] = []
    for key in ("elements", "columns", "actions"):
        for child in element.get(key) or []:
            found += _buttons(child)
    return found
