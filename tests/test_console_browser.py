"""Drives the web console in headless Chromium against a real daemon (echo expert).

Needs a Redis server (REDIS_URL, default redis://127.0.0.1:6379/0) and Chromium at
/usr/bin/chromium (or CHROMIUM). Run:  pytest -m browser tests/test_console_browser.py
With XGW_SCREENSHOT=1 it also saves docs/console.png.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

playwright_api = pytest.importorskip("playwright.async_api")
redis_lib = pytest.importorskip("redis")
Page = playwright_api.Page
expect = playwright_api.expect

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TIMEOUT_MS = 15_000

CONFIG = """\
redis: {{url: "{redis}", keyPrefix: "{prefix}"}}
dataDir: {data}
logging: {{format: json}}
runtime: {{shutdownGraceSeconds: 2}}
experts:
  - {{id: echo, kind: echo, stepDelayMs: 300, charDelayMs: 30, chunkChars: 2}}
integrations:
  - {{id: console, platform: console, xpertId: echo, summaryWindowSeconds: 0.5,
      updateIntervalMs: 150}}
"""


@dataclass
class Daemon:
    url: str
    log: Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=1) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    client = redis_lib.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis_lib.RedisError as exc:
        client.close()
        pytest.skip(f"no Redis at {REDIS_URL}: {exc}")
    tmp = tmp_path_factory.mktemp("console")
    prefix = "tb" + uuid.uuid4().hex[:8]
    config = tmp / "gateway.yaml"
    config.write_text(CONFIG.format(redis=REDIS_URL, prefix=prefix, data=tmp / "data"))
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp / "daemon.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "run", "--config", str(config), "--port", str(port)],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while not _healthy(url):
            if proc.poll() is not None:
                pytest.fail(f"daemon exited with {proc.returncode}:\n{log.read_text()}")
            if time.monotonic() > deadline:
                pytest.fail(f"daemon not healthy after 30 s:\n{log.read_text()}")
            time.sleep(0.1)
        yield Daemon(url=url, log=log)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        try:
            keys = list(client.scan_iter(match=f"{prefix}:*", count=500))
            if keys:
                client.delete(*keys)
        finally:
            client.close()


@pytest.fixture
async def page(daemon: Daemon) -> AsyncIterator[Page]:
    async with playwright_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = await browser.new_context(viewport={"width": 1280, "height": 800})
            pg = await context.new_page()
            pg.set_default_timeout(TIMEOUT_MS)
            expect.set_options(timeout=TIMEOUT_MS)
            errors: list[str] = []
            pg.on("pageerror", lambda exc: errors.append(str(exc)))
            await pg.goto(daemon.url + "/console/")
            await expect(pg.locator("#conn")).to_have_attribute("data-state", "live")
            yield pg
            assert not errors, f"JavaScript errors on the page: {errors}"
        finally:
            await browser.close()


# --- helpers ---------------------------------------------------------------------------------


async def open_chat(page: Page, chat_id: str) -> None:
    item = page.locator(f"[data-chat-id='{chat_id}']")
    await item.click()
    await expect(item).to_have_class(re.compile(r"\bactive\b"))


async def send(page: Page, text: str, *, mention: bool = True) -> str:
    """Types and sends a message; returns the id of the user message once it is shown."""
    await page.locator("#mention").set_checked(mention)
    await page.locator("#composer").fill(text)
    await page.locator("#send").click()
    msg = page.locator("[data-role='user']", has_text=text).last
    await expect(msg).to_be_visible()
    await expect(page.locator("#composer")).to_have_value("")
    return str(await msg.get_attribute("data-message-id"))


def card_row_after(page: Page, user_msg_id: str) -> playwright_api.Locator:
    """The first bot message with a card shown after the given user message."""
    return page.locator(f"[data-message-id='{user_msg_id}'] ~ [data-role='bot']:has(.card)").first


def card_after(page: Page, user_msg_id: str) -> playwright_api.Locator:
    return card_row_after(page, user_msg_id).locator(".card")


async def watch_cards(page: Page) -> None:
    """Records every (status, answer, step states) a card goes through, in the page itself."""
    await page.evaluate("""() => {
        window.__seen = [];
        const snap = () => {
            for (const c of document.querySelectorAll('.card')) {
                const row = c.closest('[data-message-id]');
                window.__seen.push({
                    id: row.dataset.messageId, status: c.dataset.status,
                    answer: c.querySelector('.answer')?.innerText ?? '',
                    steps: [...c.querySelectorAll('.steps li')].map(li => li.dataset.stepStatus),
                });
            }
        };
        new MutationObserver(snap).observe(document.querySelector('#timeline'),
                                          {childList: true, subtree: true, attributes: true});
    }""")


async def seen(page: Page, message_id: str) -> list[dict[str, object]]:
    snaps: list[dict[str, object]] = await page.evaluate("window.__seen")
    return [s for s in snaps if s["id"] == message_id]


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
    await expect(card.locator(".steps li[data-step-status='done']")).to_have_count(3)
    await expect(card.locator(".answer blockquote")).to_contain_text("restart")
    await expect(card).to_have_attribute("data-status", "running")
    shot = tmp_path / "console.png"
    await page.screenshot(path=str(shot))
    shutil.copyfile(shot, ROOT / "docs" / "console.png")
