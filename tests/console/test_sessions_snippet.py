"""The quick start's Sessions tab out of the box, in headless Chromium against a real daemon
with no ``admin.token``: it offers the two config lines that turn the admin API on, with a token
made in the browser, and once the config is reloaded (SIGHUP) it opens the sessions with that
token by itself, nothing typed."""

from __future__ import annotations

import os
import re
import signal
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


async def test_the_sessions_tab_offers_a_token_and_uses_it_once_the_config_has_it(
    page: Page, daemon: Daemon
) -> None:
    await page.locator(".views a[data-view='sessions']").click()
    await expect(page.locator("#admin-off")).to_be_visible()
    snippet = page.locator("#admin-snippet")
    await expect(snippet).to_have_text(re.compile(r"^admin:\n  token: [0-9a-f]{48}$"))
    lines = (await snippet.text_content() or "").splitlines()
    token = lines[1].split(": ", 1)[1]
    # The same token while the tab lives: the snippet copied earlier stays right.
    await page.locator(".views a[data-view='chat']").click()
    await page.locator(".views a[data-view='sessions']").click()
    await expect(snippet).to_have_text("\n".join(lines))
    await page.locator("#admin-copy").click()
    # The user pastes the lines into the config and reloads it.
    bearer: list[str] = []
    page.on(
        "request",
        lambda r: bearer.append(r.headers.get("authorization", "")) if "/v1.0/" in r.url else None,
    )
    assert daemon.config is not None
    daemon.config.write_text(daemon.config.read_text() + "\n".join(lines) + "\n")
    os.kill(daemon.pid, signal.SIGHUP)
    await expect(page.locator("#sessions-body")).to_be_visible(timeout=15_000)
    await expect(page.locator("#admin-off")).to_be_hidden()
    await expect(page.locator("#token-form")).to_be_hidden()
    assert bearer and set(bearer) == {f"Bearer {token}"}
