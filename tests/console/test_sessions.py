"""The console's Sessions page in headless Chromium against a real daemon (echo expert, real
Redis): the admin token asked once, live and recent sessions, the filters, a session's audit
trail as a timeline per turn (input, context, steps with durations, answer, timings), the usage
panel when the usage route answers, the chat view still there; at phone width too.

Run:  pytest -m browser tests/console/test_sessions.py  (XGW_SCREENSHOT=1: docs/sessions.png)
"""

from __future__ import annotations

import os
import re
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator

import pytest

from tests.support.console_browser import (
    CONFIG,
    DESKTOP,
    PHONE,
    ROOT,
    Daemon,
    Page,
    browse,
    card_after,
    expect,
    open_chat,
    run_daemon,
    send,
)
from tests.support.console_sessions import TOKEN, post_message, row, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]

STEPS = ["Reading your message", "Thinking it over", "Writing the answer"]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    yield from run_daemon(tmp_path_factory, CONFIG + f'admin: {{{{token: "{TOKEN}"}}}}\n')


@pytest.fixture
async def page(daemon: Daemon) -> AsyncIterator[Page]:
    async with browse(daemon, DESKTOP) as pg:
        yield pg


@pytest.fixture
async def phone(daemon: Daemon) -> AsyncIterator[Page]:
    async with browse(daemon, PHONE, is_mobile=True, has_touch=True) as pg:
        yield pg


def usage_route(daemon: Daemon) -> bool:
    """Whether the daemon has the usage route the page's usage panel reads."""
    request = urllib.request.Request(
        daemon.url + "/v1.0/usage?integrationId=console&chatId=team",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return bool(resp.status == 200)
    except urllib.error.HTTPError:
        return False


async def test_sessions_page_lists_filters_and_shows_a_turns_timeline(
    page: Page, daemon: Daemon
) -> None:
    # A turn in the team chat from the page, then a long one in Bob's chat that still runs
    # when the Sessions page opens.
    await open_chat(page, "team")
    user_id = await send(page, "Please summarise the incident", mention=True)
    await expect(card_after(page, user_id)).to_have_attribute("data-status", "done")
    post_message(daemon, "dm-bob", "a long question that takes a while to answer " * 6)
    await sign_in(page)

    bob, team = row(page, "dm-bob"), row(page, "team")
    await expect(team).to_have_count(1)
    await expect(bob).to_have_attribute("data-live", "true")
    await expect(bob.locator(".live")).to_have_text("live")
    await expect(team.locator(".outcome")).to_have_attribute("data-outcome", "done")
    await expect(team.locator("td").nth(0)).to_have_text("console")
    await expect(team.locator("td").nth(2)).to_have_text("echo")
    await expect(team.locator("td").nth(4)).to_have_text("1")
    # The page refreshes itself: Bob's turn ends and his session is no longer live.
    await expect(bob).to_have_attribute("data-live", "false", timeout=20_000)
    await expect(bob.locator(".outcome")).to_have_attribute("data-outcome", "done")

    # Filters: by chat, by outcome (nothing failed), back to all.
    await page.locator("#f-chat").fill("team")
    await page.locator("#f-apply").click()
    await expect(page.locator("#session-list tbody tr")).to_have_count(1)
    await expect(team).to_have_count(1)
    await page.locator("#f-outcome").select_option("error")
    await expect(page.locator("#session-list tbody tr")).to_have_count(0)
    await expect(page.locator("#sessions-empty")).to_be_visible()
    await page.locator("#f-outcome").select_option("")
    await page.locator("#f-chat").fill("")
    # Search (the archive, the daemon's SQLite file): what was said in the team chat.
    await page.locator("#f-q").fill("SUMMARISE the incident")
    await page.locator("#f-apply").click()
    await expect(page.locator("#session-list tbody tr")).to_have_count(1, timeout=20_000)
    await expect(team).to_have_count(1)
    await expect(page.locator("#sessions-more")).to_be_hidden()
    await page.locator("#f-q").fill("")
    await page.locator("#f-apply").click()
    await expect(page.locator("#session-list tbody tr")).to_have_count(2)

    # The team session's trail: input -> context -> steps -> answer, with timings.
    await team.click()
    await expect(page).to_have_url(re.compile(r"#sessions/[0-9a-f]+$"))
    await expect(team).to_have_class(re.compile(r"\bactive\b"))
    trail = page.locator("#trail")
    await expect(trail.locator(".trail-head h2")).to_have_text("console · team")
    turn = trail.locator("article.turn")
    await expect(turn).to_have_count(1)
    await expect(turn).to_have_attribute("data-outcome", "done")
    stages = turn.locator(".flow > li")
    await expect(stages).to_have_count(4)
    assert await stages.evaluate_all("els => els.map(e => e.dataset.stage)") == [
        "input",
        "context",
        "steps",
        "answer",
    ]
    await expect(turn.locator(".input-text")).to_have_text("Please summarise the incident")
    await expect(turn.locator(".trigger")).to_have_text("message")
    await expect(turn.locator("[data-stage='context'] .facts")).to_contain_text("variables")
    steps = turn.locator(".audit-steps li")
    await expect(steps).to_have_count(3)
    for i, title in enumerate(STEPS):
        await expect(steps.nth(i)).to_have_attribute("data-step-status", "done")
        await expect(steps.nth(i).locator(".step-title")).to_have_text(title)
        await expect(steps.nth(i).locator(".dur")).to_have_text(re.compile(r"^\d+(\.\d+)? m?s$"))
    await expect(turn.locator(".answer-text")).to_contain_text("Please summarise the incident")
    for name in ("queued", "first card", "run"):
        await expect(turn.locator(f"[data-timing='{name}'] b")).to_have_text(
            re.compile(r"^\d+(\.\d+)? m?s$")
        )
    # The usage panel shows when the usage route answers, and is hidden when it does not.
    if usage_route(daemon):
        await expect(trail.locator("#usage")).to_contain_text("Turns in the last hour")
    else:
        await expect(trail.locator("#usage")).to_have_count(0)

    if os.environ.get("XGW_SCREENSHOT") == "1":
        await page.screenshot(path=str(ROOT / "docs" / "sessions.png"))

    # A reload keeps the token (this tab's sessionStorage) and the open session.
    await page.reload()
    await expect(page.locator("#conn")).to_have_attribute("data-state", "live")
    await expect(page.locator("#token-form")).to_be_hidden()
    await expect(page.locator("#trail article.turn")).to_have_count(1)

    # Back to the chat: it works as before.
    await page.locator(".views a[data-view='chat']").click()
    await expect(page.locator("#chat-view")).to_be_visible()
    await open_chat(page, "team")
    again = await send(page, "One more thing", mention=True)
    await expect(card_after(page, again)).to_have_attribute("data-status", "done")

    # The new turn is the trail's second, in order.
    await page.locator(".views a[data-view='sessions']").click()
    await team.click()
    await expect(trail.locator("article.turn")).to_have_count(2)
    await expect(trail.locator("article.turn").nth(1).locator(".input-text")).to_have_text(
        "One more thing"
    )


async def test_sessions_page_at_phone_width(phone: Page, daemon: Daemon) -> None:
    post_message(daemon, "dm-carol", "hello from a phone", sender="carol")
    await sign_in(phone)
    carol = row(phone, "dm-carol")
    await expect(carol.locator(".outcome")).to_have_attribute(
        "data-outcome", "done", timeout=20_000
    )
    await carol.click()
    turn = phone.locator("#trail article.turn").first
    await expect(turn.locator(".audit-steps li")).to_have_count(3)
    await expect(turn.locator(".input-text")).to_be_in_viewport()
    width = await phone.evaluate("document.documentElement.clientWidth")
    out = await phone.evaluate(
        """(width) => [...document.querySelectorAll('#trail *, .filters *, .views *')]
            .filter(e => e.getClientRects().length && !e.closest('.session-list-box'))
            .filter(e => { const r = e.getBoundingClientRect();
                           return r.width && (r.left < -1 || r.right > width + 1); })
            .map(e => e.tagName + '.' + e.className)""",
        width,
    )
    assert out == [], f"sticks out at phone width: {out}"


async def test_the_list_polls_once_per_period_and_keeps_rows_that_did_not_change(
    page: Page, daemon: Daemon
) -> None:
    # A refused token, then the right one: two sign-ins, one poll timer (two timers redrew the
    # list twice a period, and a click between the two redraws was lost).
    post_message(daemon, "dm-dave", "a quiet one", sender="dave")
    await sign_in(page)
    dave = row(page, "dm-dave")
    await expect(dave.locator(".outcome")).to_have_attribute("data-outcome", "done", timeout=20_000)
    handle = await dave.element_handle()
    polls: list[str] = []
    page.on("request", lambda r: polls.append(r.url) if "/v1.0/sessions?" in r.url else None)
    await page.wait_for_timeout(7_500)  # one period (5 s) and a half: one poll, not two
    assert len(polls) == 1, polls
    # The row did not change, so the poll kept its element rather than drawing it again.
    assert await handle.evaluate("tr => tr.isConnected")
