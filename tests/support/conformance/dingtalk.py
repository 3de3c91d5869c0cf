"""DingTalk in the conformance suite: signed robot messages over HTTP, or pushed over the stream
mode's WebSocket (tests/support/dingtalk.py), to an in-process gateway; the answer read from the
fake DingTalk: markdown robot messages (after the first, "working on it", one), or the AI card's
final content followed by the markdown messages that continue it.

Modes: ``webhook`` (markdown through each message's sessionWebhook), ``openapi`` (markdown,
messages without a sessionWebhook: the robot OpenAPI), ``stream`` (markdown, messages over the
stream mode), ``ai-card`` (DingTalk's public AI card) and ``template`` (an AI card of the
operator's own template). A part is read only from the API its mode sends through, and the
buttons of a markdown answer only from its last part: a part elsewhere fails the read."""

from __future__ import annotations

import json
import re
from typing import Any

from adapters.dingtalk.crypto import robot_sign
from tests.fakes.dingtalk import FakeDingTalk
from tests.support.conformance.base import Answer, Harness, Sent
from tests.support.dingtalk import SECRET, robot_message
from tests.support.waits import eventually

ROBOT = "/v1.0/im/bot/messages/get"
_MARK = re.compile(r"\n\n\((\d+)/(\d+)\)$")


class DingTalkHarness(Harness):
    id = "dingtalk"
    modes = ("webhook", "openapi", "stream", "ai-card", "template")
    integration_id = "dt"

    async def open(self) -> None:
        self.fake = FakeDingTalk()
        await self.fake.start()
        self._seen_from = 0

    async def shut(self) -> None:
        await self.fake.stop()

    def integration(self, **options: Any) -> dict[str, Any]:
        integ: dict[str, Any] = {
            "id": self.integration_id,
            "platform": "dingtalk",
            "xpertId": "echo",
            "clientId": "dingappkey",
            "clientSecret": SECRET,
            "connectionMode": "stream" if self.mode == "stream" else "http",
            "apiBase": self.fake.base,
            "summaryWindowSeconds": 0,
            "maxWindowSeconds": 5,
            "updateIntervalMs": 100,
        }
        if self.mode == "template":
            integ["cardTemplateId"] = "tpl.schema"
        elif self.mode != "ai-card":
            integ["cards"] = "markdown"
        integ.update({k: v for k, v in options.items() if v is not None})
        return integ

    def config(self, experts: list[dict[str, Any]] | None, **options: Any) -> dict[str, Any]:
        config = super().config(experts, **options)
        # Signed action links point at the gateway's public URL: its own port here.
        config["server"] = {"publicUrl": f"http://127.0.0.1:{self.port}"}
        return config

    async def connected(self) -> None:
        if self.mode == "stream":
            await eventually(lambda: self.fake.stream.connects >= 1)

    @property
    def markdown(self) -> bool:
        return self.mode in ("webhook", "openapi", "stream")

    async def send(self, text: str, *, user: str = "alice", group: bool = False) -> Sent:
        message = robot_message(
            self.fake, text, group=group, sender=user, webhook=self.mode != "openapi"
        )
        self._seen_from = len(self.fake.sent())
        if self.mode == "stream":
            await self.fake.push("CALLBACK", ROBOT, message)
        else:
            ts = str(message["createAt"])
            headers = {"timestamp": ts, "sign": robot_sign(SECRET, ts)}
            url = f"http://127.0.0.1:{self.gateway.port}/api/dingtalk/webhook/{self.integration_id}"
            async with self.gateway.client.http.post(url, json=message, headers=headers) as resp:
                assert resp.status == 200, resp.status
        return Sent(message["msgId"], user, group, {"from": self._seen_from})

    def _messages(self, sent: Sent) -> list[dict[str, Any]]:
        return self.fake.sent()[int(sent.extra["from"]) :]

    def seen(self, sent: Sent) -> Answer | None:
        messages = self._messages(sent)
        via = "openapi" if self.mode == "openapi" else "webhook"
        assert all(m["via"] == via for m in messages), [m["via"] for m in messages]
        if self.markdown:
            if len(messages) < 2:
                return None
            parts = [m["text"] for m in messages[1:]]  # the first: "working on it"
            assert not any(m["buttons"] for m in messages[1:-1]), "buttons on the last part only"
            buttons = list(messages[-1]["buttons"])
        else:
            # Final: the last stream frame (a template), or flowStatus 3, "finished" (both).
            cards = [
                c
                for c in self.fake.cards.values()
                if c.finalized or c.params.get("flowStatus") == "3"
            ]
            if not cards:
                return None
            card = cards[-1]
            # The public card's final state is one PUT of its whole msgContent; a template's is
            # its last stream frame.
            shown = (
                card.params.get("msgContent", "")
                if self.mode == "ai-card"
                else card.stream.get("content", "")
            )
            parts = [shown, *(m["text"] for m in messages)]
            buttons = [k for k, v in card.params.items() if k.startswith("show") and v == "true"]
        last = _MARK.search(parts[-1])
        if last and len(parts) != int(last[2]):
            return None
        return Answer(parts, buttons)

    def written(self) -> str:
        return json.dumps([c.body for c in self.fake.calls], ensure_ascii=False)

    def refused(self) -> list[str]:
        return [
            f"{c.method} {c.path} {c.status}"
            for c in self.fake.calls
            if c.status >= 300 or not c.delivered
        ]
