"""Drives the web console in headless Chromium against a real daemon (echo expert).

Needs a Redis server (REDIS_URL, default redis://127.0.0.1:6379/0) and Chromium at
/usr/bin/chromium (or CHROMIUM). Run:  pytest -m browser tests/console/test_browser.py
With XGW_SCREENSHOT=1 it also saves docs/console.png.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.console_browser import (
    DESKTOP,
    ROOT,
    Daemon,
    Page,
    browse,
    card_after,
    card_row_after,
    daemon,
    expect,
    open_chat,
    page,
    run_daemon,
    seen,
    send,
    watch_cards,
)

__all__ = ["daemon", "page"]  # fixtures
pytestmark = [pytest.mark.browser, pytest.mark.slow]


# --- tests -----------------------------------------------------------------------------------


async def test_group_message_streams_to_done_then_new_conversation(page: Page) -> None:
    await open_chat(page, "team")
    await expect(page.locator("#mention")).to_be_enabled()
    await watch_cards(page)
    text = "Hello bot, please echo this sentence back to me slowly"
    user_id = await send(page, text, mention=True)
    user_msg = page.locator(f"[data-message-id='{user_id}']")
    await expect(user_msg).to_have_attribute("data-role", "user")
    await expect(user_msg.locator(".tag")).to_have_text("@Xpert")

    card = card_after(page, user_id)
    await expect(card).to_be_visible()
    await expect(card.locator("[data-action-id='stop']")).to_be_visible()
    await expect(card).to_have_attribute("data-status", "done")
    card_id = str(await card_row_after(page, user_id).get_attribute("data-message-id"))

    # Final state: every step ticked, the answer quotes the text, New conversation offered.
    steps = card.locator(".steps li")
    assert await steps.count() >= 3
    for i in range(await steps.count()):
        await expect(steps.nth(i)).to_have_attribute("data-step-status", "done")
        await expect(steps.nth(i).locator(".mark")).to_have_text("✓")
    await expect(card.locator(".answer")).to_contain_text("You said:")
    await expect(card.locator(".answer blockquote")).to_have_text(text)
    await expect(card.locator("[data-action-id='new']")).to_have_text("New conversation")
    await expect(card.locator("[data-action-id='stop']")).to_have_count(0)

    # What happened on the way: running first, steps running then done, answer streamed.
    history = await seen(page, card_id)
    assert history[0]["status"] == "running", history[0]
    assert any("running" in s["steps"] for s in history), "never saw a step running"
    final = history[-1]["answer"]
    partials = {s["answer"] for s in history if s["status"] == "running" and s["answer"]}
    partials.discard(final)
    assert len(partials) >= 2, f"answer did not stream: {partials}"

    # 3. New conversation -> a bot text message saying so.
    await card.locator("[data-action-id='new']").click()
    notice = page.locator("[data-role='bot']:not(:has(.card))", has_text="new conversation")
    await expect(notice.last).to_be_visible()
    await expect(notice.last).to_contain_text("Started a new conversation")


async def test_stop_cancels_running_card(page: Page) -> None:
    await open_chat(page, "team")
    text = "Please repeat this rather long message: " + "lorem ipsum dolor sit amet " * 6
    user_id = await send(page, text.strip(), mention=True)
    card = card_after(page, user_id)
    await expect(card).to_have_attribute("data-status", "running")
    await card.locator("[data-action-id='stop']").click()
    await expect(card).to_have_attribute("data-status", "cancelled")
    await expect(card.locator("[data-action-id='stop']")).to_have_count(0)


async def test_quick_messages_merge_into_one_card(page: Page) -> None:
    await open_chat(page, "dm-bob")
    # A direct chat: the user follows the chat, the mention box does not apply.
    await expect(page.locator("#user")).to_have_value("bob")
    await expect(page.locator("#mention")).to_be_disabled()
    first, second = "first quick message alpha", "second quick message beta"
    composer = page.locator("#composer")
    await composer.fill(first)
    await composer.press("Enter")
    await expect(composer).to_have_value("")
    await composer.fill(second)
    await composer.press("Enter")
    first_id = str(
        await page.locator("[data-role='user']", has_text=first).last.get_attribute(
            "data-message-id"
        )
    )
    await expect(page.locator("[data-role='user']", has_text=second)).to_be_visible()
    card = card_after(page, first_id)
    await expect(card).to_have_attribute("data-status", "done")
    await expect(card.locator(".answer")).to_contain_text(first)
    await expect(card.locator(".answer")).to_contain_text(second)
    # Exactly one card answers the pair.
    cards_after = page.locator(f"[data-message-id='{first_id}'] ~ [data-role='bot'] .card")
    await expect(cards_after).to_have_count(1)


async def test_confirm_then_done(page: Page) -> None:
    await open_chat(page, "dm-carol")
    await page.locator("#composer").fill("Delete the staging database [confirm]")
    await page.locator("#composer").press("Enter")
    user_id = str(
        await page.locator("[data-role='user']", has_text="[confirm]").last.get_attribute(
            "data-message-id"
        )
    )
    card = card_after(page, user_id)
    await expect(card).to_have_attribute("data-status", "waiting")
    await expect(card.locator("[data-action-id='reject']")).to_be_visible()
    await card.locator("[data-action-id='confirm']").click()
    await expect(card).to_have_attribute("data-status", "done")


@pytest.mark.skipif(os.environ.get("XGW_SCREENSHOT") != "1", reason="set XGW_SCREENSHOT=1")
async def test_screenshot(page: Page, tmp_path: Path) -> None:
    """Saves docs/console.png: a finished answer and one still streaming."""
    await open_chat(page, "team")
    await page.locator("#user").select_option("bob")
    await send(page, "Morning! The database migration finished overnight.", mention=False)
    await page.locator("#user").select_option("alice")
    first = await send(page, "Nice. Can you note that for the weekly report?", mention=True)
    await expect(card_after(page, first)).to_have_attribute("data-status", "done")
    await page.locator("#user").select_option("carol")
    text = (
        "Also draft a short status update: two services still need a restart "
        "and the dashboard is green again."
    )
    second = await send(page, text, mention=True)
    card = card_after(page, second)
    await expect(card.locator(".steps li[data-step-status='done']")).to_have_count(2)
    await expect(card.locator(".steps li[data-step-status='running']")).to_have_text(
        "Writing the answer"
    )
    await expect(card.locator(".answer blockquote")).to_contain_text("restart")
    await expect(card).to_have_attribute("data-status", "running")
    shot = tmp_path / "console.png"
    await page.screenshot(path=str(shot))
    shutil.copyfile(shot, ROOT / "docs" / "console.png")


# Its own Redis (embedded, no redis.url): the test ends it under the daemon.
EMBEDDED = """\
dataDir: {data}
logging: {{format: json}}
runtime: {{shutdownGraceSeconds: 2}}
experts:
  - {{id: echo, kind: echo}}
integrations:
  - {{id: console, platform: console, xpertId: echo}}
"""


@pytest.fixture
def embedded_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    yield from run_daemon(tmp_path_factory, EMBEDDED)


async def test_live_means_the_gateway_is_ready_not_only_the_stream_open(
    embedded_daemon: Daemon,
) -> None:
    # The gateway keeps serving the page and its event stream with its Redis gone (as when a
    # second daemon took the embedded Redis away): the indicator must not say "Live" then.
    async with browse(embedded_daemon, DESKTOP) as pg:  # "Live" first: stream open, ready
        lines = embedded_daemon.log.read_text().splitlines()
        events = [json.loads(x) for x in lines if x.startswith("{")]
        [pid] = [e["pid"] for e in events if e.get("event") == "embedded redis started"]
        os.kill(pid, signal.SIGKILL)
        conn = pg.locator("#conn")
        await expect(conn).to_have_text("Redis unreachable")
        await expect(conn).to_have_attribute("data-state", "down")
