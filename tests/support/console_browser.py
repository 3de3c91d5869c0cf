"""Headless Chromium against a real daemon (echo expert) for the console's browser tests.

Needs a Redis server (REDIS_URL, default redis://127.0.0.1:6379/0) and Chromium at
/usr/bin/chromium (or CHROMIUM). Import the fixtures (``daemon``, ``page``, ``phone``) into a
test module; each module gets its own daemon with its own Redis key prefix, removed at the end.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.helpers import daemon_env
from tests.support.redis_server import free_port
from tests.support.spawn import spawn_gateway

playwright_api = pytest.importorskip("playwright.async_api")
redis_lib = pytest.importorskip("redis")
Page = playwright_api.Page
expect = playwright_api.expect

ROOT = Path(__file__).resolve().parents[2]
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
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 375, "height": 740}  # an iPhone SE / mini sized screen

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
    config: Path | None = None  # its config file (a test may change it and send SIGHUP)
    pid: int = 0


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=1) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    yield from run_daemon(tmp_path_factory, CONFIG)


def run_daemon(tmp_path_factory: pytest.TempPathFactory, template: str) -> Iterator[Daemon]:
    """The daemon of a module's ``daemon`` fixture, from a config ``template`` (CONFIG's
    placeholders: redis, prefix, data)."""
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
    config.write_text(template.format(redis=REDIS_URL, prefix=prefix, data=tmp / "data"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp / "daemon.log"
    with log.open("wb") as out:
        proc = spawn_gateway(
            *("run", "--config", str(config), "--port", str(port)),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=daemon_env(),  # a config naming no redis.url gets the embedded Redis
        )
    try:
        deadline = time.monotonic() + 30
        while not healthy(url):
            if proc.poll() is not None:
                pytest.fail(f"daemon exited with {proc.returncode}:\n{log.read_text()}")
            if time.monotonic() > deadline:
                pytest.fail(f"daemon not healthy after 30 s:\n{log.read_text()}")
            time.sleep(0.1)
        yield Daemon(url=url, log=log, config=config, pid=proc.pid)
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


@asynccontextmanager
async def browse(
    daemon: Daemon, viewport: dict[str, int], *, path: str = "/console/", **options: object
) -> AsyncIterator[Page]:
    """The console (``path``) open in a fresh headless Chromium, live; no JavaScript error may
    happen."""
    async with playwright_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = await browser.new_context(viewport=viewport, **options)
            pg = await context.new_page()
            pg.set_default_timeout(TIMEOUT_MS)
            expect.set_options(timeout=TIMEOUT_MS)
            errors: list[str] = []
            pg.on("pageerror", lambda exc: errors.append(str(exc)))
            await pg.goto(daemon.url + path)
            await expect(pg.locator("#conn")).to_have_attribute("data-state", "live")
            yield pg
            assert not errors, f"JavaScript errors on the page: {errors}"
        finally:
            await browser.close()


@pytest.fixture
async def page(daemon: Daemon) -> AsyncIterator[Page]:
    async with browse(daemon, DESKTOP) as pg:
        yield pg


@pytest.fixture
async def phone(daemon: Daemon) -> AsyncIterator[Page]:
    async with browse(daemon, PHONE, is_mobile=True, has_touch=True, device_scale_factor=2) as pg:
        yield pg


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
    """Records every (status, answer, step states, step marks and titles, head) a card goes
    through, in the page itself."""
    await page.evaluate("""() => {
        window.__seen = [];
        const snap = () => {
            for (const c of document.querySelectorAll('.card')) {
                const row = c.closest('[data-message-id]');
                const items = [...c.querySelectorAll('.steps li')];
                window.__seen.push({
                    id: row.dataset.messageId, status: c.dataset.status,
                    answer: c.querySelector('.answer')?.innerText ?? '',
                    steps: items.map(li => li.dataset.stepStatus),
                    marks: items.map(li => li.querySelector('.mark').textContent),
                    titles: items.map(li => li.lastChild.textContent),
                    head: c.querySelector('.card-head').innerText,
                });
            }
        };
        new MutationObserver(snap).observe(document.querySelector('#timeline'),
                                          {childList: true, subtree: true, attributes: true});
    }""")


async def seen(page: Page, message_id: str) -> list[dict[str, Any]]:
    snaps: list[dict[str, Any]] = await page.evaluate("window.__seen")
    return [s for s in snaps if s["id"] == message_id]
