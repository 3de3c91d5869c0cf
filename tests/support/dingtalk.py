"""DingTalk test helpers: a fake DingTalk plus an in-process gateway pointed at it, and
realistic robot messages (docs/dingtalk.md, "Robot messages")."""

from __future__ import annotations

import contextlib
import html
import re
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urljoin

from adapters.dingtalk.crypto import robot_sign
from tests.fakes.dingtalk import FakeDingTalk
from tests.support.configs import base_config
from tests.support.helpers import InProcessGateway, free_port
from tests.support.platform import PlatformHarness

SECRET = "dt-app-secret"
FORM = re.compile(r'<form method="post" action="(?P<action>[^"]*)">\s*'
                  r'<input type="hidden" name="t" value="(?P<token>[^"]*)">')  # fmt: skip
BOT_ID = "$:LWCP_v1:$bot"


def dingtalk_config(prefix: str, fake: FakeDingTalk, port: int, **options: Any) -> dict[str, Any]:
    config = base_config(prefix)
    config["server"] = {"publicUrl": f"http://127.0.0.1:{port}"}
    integration = {
        "id": "dt",
        "platform": "dingtalk",
        "xpertId": "echo",
        "clientId": "dingappkey",
        "clientSecret": SECRET,
        "connectionMode": "http",
        "apiBase": fake.base,
        "summaryWindowSeconds": 0,
        "maxWindowSeconds": 5,
        "updateIntervalMs": 100,
    }
    if "cardTemplateId" not in options and "cards" not in options:
        # Most tests are of markdown messages; the AI card's (the default) say cards=None.
        integration["cards"] = "markdown"
    integration.update({k: v for k, v in options.items() if v is not None})
    config["integrations"] = [integration]
    return config


class DingTalkHarness(PlatformHarness[FakeDingTalk]):
    """The fake DingTalk plus an in-process gateway with one ``dt`` integration pointed at it."""

    async def post(
        self, body: dict[str, Any], *, timestamp: int | None = None, sign: str | None = None
    ) -> tuple[int, Any]:
        ts = str(timestamp if timestamp is not None else int(time.time() * 1000))
        headers = {"timestamp": ts, "sign": sign if sign is not None else robot_sign(SECRET, ts)}
        url = f"{self.base}/api/dingtalk/webhook/dt"
        async with self.http.post(url, json=body, headers=headers) as resp:
            return resp.status, await resp.text()

    async def get(self, url: str) -> tuple[int, str]:
        async with self.http.get(url) as resp:
            return resp.status, await resp.text()

    async def click(self, url: str) -> tuple[int, str]:
        """What a person does with a button link: open it (a page, nothing done yet), then press
        the page's button, which posts its form back as a browser does (same origin)."""
        status, page = await self.get(url)
        form = FORM.search(page)
        if status != 200 or form is None:
            return status, page
        action = urljoin(url, html.unescape(form["action"]))
        data = {"t": html.unescape(form["token"])}
        headers = {"Origin": self.base, "Sec-Fetch-Site": "same-origin"}
        async with self.http.post(action, data=data, headers=headers) as resp:
            return resp.status, await resp.text()


async def start_harness(
    prefix: str, fake: FakeDingTalk, *, experts: list[dict[str, Any]] | None = None, **options: Any
) -> tuple[InProcessGateway, DingTalkHarness]:
    port = free_port()
    config = dingtalk_config(prefix, fake, port, **options)
    if experts is not None:
        config["experts"] = experts
    gateway = InProcessGateway(config)
    gateway.port = port
    await gateway.start()
    return gateway, DingTalkHarness(fake, gateway)


@contextlib.asynccontextmanager
async def running(
    prefix: str, *, experts: list[dict[str, Any]] | None = None, **options: Any
) -> AsyncIterator[tuple[FakeDingTalk, DingTalkHarness]]:
    """A fake DingTalk and a gateway with one ``dt`` integration pointed at it."""
    fake = FakeDingTalk()
    await fake.start()
    _gateway, harness = await start_harness(prefix, fake, experts=experts, **options)
    try:
        yield fake, harness
    finally:
        await harness.close()
        await fake.stop()


def robot_message(
    fake: FakeDingTalk,
    text: str = "hello",
    *,
    group: bool = False,
    mention: bool = True,
    msg_id: str | None = None,
    expired_webhook: bool = False,
    webhook: bool = True,
    sender: str = "staff1",
    conversation: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    now = int(time.time() * 1000)
    url, expires = fake.session_webhook(expired=expired_webhook)
    # Whoever writes to the robot is a member of the org: in its directory (topapi/v2/user/get).
    fake.users.setdefault(sender, {"name": sender.capitalize()})
    body: dict[str, Any] = {
        "msgId": msg_id or f"msg{uuid.uuid4().hex[:12]}",
        "msgtype": "text",
        "text": {"content": f" {text}" if group else text},
        "conversationId": conversation or ("cidGROUP" if group else f"cidP2P{sender}"),
        "conversationType": "2" if group else "1",
        "senderId": f"$:LWCP_v1:${sender}",
        "senderStaffId": sender,
        "senderNick": sender.capitalize(),
        "senderCorpId": "dingcorp",
        "chatbotUserId": BOT_ID,
        "chatbotCorpId": "dingcorp",
        "robotCode": "dingappkey",
        "isAdmin": False,
        "createAt": now,
        "isInAtList": group and mention,
        "atUsers": [{"dingtalkId": BOT_ID}] if group and mention else [],
    }
    if group:
        body["conversationTitle"] = "Team"
    if webhook:
        body["sessionWebhook"] = url
        body["sessionWebhookExpiredTime"] = expires
    body.update(extra)
    return body
