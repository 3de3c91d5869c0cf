"""The console's Sessions tab with the admin API off (no ``admin.token``), in headless Chromium
against a real daemon: it says so at once, never asking for a token it could not use, and the
console's ``api/config`` is what tells it (``adminApi``)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import AsyncIterator, Iterator

import pytest

from tests.support.console_browser import CONFIG, DESKTOP, Daemon, Page, browse, expect, run_daemon

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    yield from run_daemon(tmp_path_factory, CONFIG)


@pytest.fixture
async def page(daemon: Daemon) -> AsyncIterator[Page]:
    async with browse(daemon, DESKTOP) as pg:
        yield pg


def console_config(daemon: Daemon) -> dict[str, object]:
    with urllib.request.urlopen(daemon.url + "/console/api/config", timeout=5) as resp:
        data: dict[str, object] = json.load(resp)
    return data


async def test_the_sessions_tab_says_the_admin_api_is_off_without_asking_for_a_token(
    page: Page, daemon: Daemon
) -> None:
    assert console_config(daemon)["adminApi"] is False
    admin_calls: list[str] = []
    page.on("request", lambda r: admin_calls.append(r.url) if "/v1.0/" in r.url else None)
    await page.locator(".views a[data-view='sessions']").click()
    await expect(page.locator("#sessions-view")).to_be_visible()
    await expect(page.locator("#admin-off")).to_be_visible()
    await expect(page.locator("#admin-off")).to_contain_text("The admin API is off")
    await expect(page.locator("#token-form")).to_be_hidden()
    await expect(page.locator("#sessions-body")).to_be_hidden()
    # Back to the chat and to Sessions again: still no token asked, no admin request made.
    await page.locator(".views a[data-view='chat']").click()
    await expect(page.locator("#chat-view")).to_be_visible()
    await page.locator(".views a[data-view='sessions']").click()
    await expect(page.locator("#admin-off")).to_be_visible()
    await expect(page.locator("#token-form")).to_be_hidden()
    assert admin_calls == []
