"""The Sessions page pages into the archive: sessions Redis no longer lists (its audit retention
is 3 s here) come from the archive database (the embedded SQLite file under dataDir) behind the
live ones, a page at a time - ``?pageSize=2`` instead of 100 - each "Older sessions" click
asking the admin API for the next page (``limit=``), the button gone once all are shown.
Headless Chromium against a real daemon (echo expert, real Redis).

Run:  pytest -m browser tests/console/test_sessions_archive.py
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from tests.support.console_browser import CONFIG, DESKTOP, Daemon, Page, browse, expect, run_daemon
from tests.support.console_sessions import TOKEN, post_message, row, sign_in
from tests.support.waits import eventually

pytestmark = [pytest.mark.browser, pytest.mark.slow]

OLD = ["old-1", "old-2", "old-3", "old-4"]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    config = (
        CONFIG + f'admin: {{{{token: "{TOKEN}"}}}}\naudit: {{{{retentionDays: {3 / 86_400}}}}}\n'
    )
    yield from run_daemon(tmp_path_factory, config)


@pytest.fixture
async def page(daemon: Daemon) -> AsyncIterator[Page]:
    async with browse(daemon, DESKTOP, path="/console/?pageSize=2") as pg:
        yield pg


async def listed(daemon: Daemon) -> list[dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(
            daemon.url + "/v1.0/sessions",
            params={"limit": "100"},
            headers={"Authorization": f"Bearer {TOKEN}"},
        ) as resp,
    ):
        body = await resp.json()
        assert resp.status == 200, body
        result: list[dict[str, Any]] = body["result"]
        return result


async def test_older_sessions_pages_through_the_archive(page: Page, daemon: Daemon) -> None:
    # One at a time: a session's place in the list is its last activity, and turns posted
    # together finish in any order.
    for chat in OLD:
        post_message(daemon, chat, f"a question in {chat}")

        async def answered(chat: str = chat) -> bool:
            return any(s["chatId"] == chat and s["turns"] for s in await listed(daemon))

        await eventually(answered, timeout=20)

    async def only_archived() -> list[dict[str, Any]] | None:
        """Every old session is the archive's alone: ended there, past Redis' retention."""
        found = {s["chatId"]: s for s in await listed(daemon)}
        old = [found.get(chat) for chat in OLD]
        done = all(s and s.get("archived") and s["status"] == "ended" and s["turns"] for s in old)
        return [s for s in old if s] if done else None

    await eventually(only_archived, timeout=60)
    post_message(daemon, "fresh", "a question now")  # Redis' (status active), listed first

    async def fresh_listed() -> bool:
        return any(s["chatId"] == "fresh" and s["status"] == "active" for s in await listed(daemon))

    await eventually(fresh_listed, timeout=20)
    await sign_in(page)
    body = page.locator("#session-list tbody tr")
    more = page.locator("#sessions-more")
    await expect(body).to_have_count(2)
    await expect(row(page, "fresh")).to_have_count(1)
    await expect(row(page, "old-4")).to_have_count(1)
    await expect(more).to_be_visible()
    for chat in ("old-3", "old-2", "old-1"):
        await expect(row(page, chat)).to_have_count(0)

    await more.click()
    await expect(body).to_have_count(4)
    await expect(row(page, "old-2")).to_have_count(1)
    await expect(row(page, "old-1")).to_have_count(0)
    await expect(more).to_be_visible()

    await more.click()
    await expect(body).to_have_count(5)
    await expect(row(page, "old-1")).to_have_count(1)
    await expect(more).to_be_hidden()  # all shown: fewer than asked for
    # Newest first, the live one ahead of the archive's.
    chats = await page.locator("#session-list tbody tr .chat-id").all_text_contents()
    assert chats == ["fresh", "old-4", "old-3", "old-2", "old-1"]
