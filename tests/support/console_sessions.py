"""The console's Sessions page, as its browser tests drive it: the admin token the page asks
for, a message posted to the console API, signing in, a chat's row in the session list."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from tests.support.console_browser import Daemon, Page, expect

TOKEN = "sessions-page-token"


def post_message(daemon: Daemon, chat: str, text: str, sender: str = "bob") -> None:
    body = {
        "integrationId": "console",
        "chatId": chat,
        "chatType": "p2p" if chat.startswith("dm-") else "group",
        "senderId": sender,
        "text": text,
        "mentionBot": True,
    }
    request = urllib.request.Request(
        daemon.url + "/console/api/messages",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as resp:
        assert resp.status == 202


async def sign_in(page: Page) -> None:
    await page.locator(".views a[data-view='sessions']").click()
    await expect(page.locator("#sessions-view")).to_be_visible()
    await expect(page.locator("#chat-view")).to_be_hidden()
    await expect(page.locator("#token-form")).to_be_visible()
    await page.locator("#token").fill("not the token")
    await page.locator("#token-submit").click()
    await expect(page.locator("#token-error")).to_have_text("That token was refused.")
    await page.locator("#token").fill(TOKEN)
    await page.locator("#token-submit").click()
    await expect(page.locator("#token-form")).to_be_hidden()
    await expect(page.locator("#sessions-body")).to_be_visible()


def row(page: Page, chat: str) -> Any:
    return page.locator("#session-list tbody tr", has=page.locator(".chat-id", has_text=chat))
