"""The console page in headless Chromium: what a newcomer sees in the first ten minutes (issue 11).

A step is ticked only once it is done; a card says its status once; Confirm keeps the steps the
card showed before the question; Reject ends in a neutral "Rejected", not a green "Done"; only
the latest card of a conversation takes clicks; the page works at phone width, has a favicon,
and an error toast never covers Send. Run:  pytest -m browser tests/console/test_page.py
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support.console_browser import (
    DESKTOP,
    PHONE,
    Daemon,
    Page,
    browse,
    card_after,
    card_row_after,
    daemon,
    expect,
    open_chat,
    page,
    phone,
    seen,
    send,
    watch_cards,
)

__all__ = ["daemon", "page", "phone"]  # fixtures
pytestmark = [pytest.mark.browser, pytest.mark.slow]

STEPS = ["Reading your message", "Thinking it over", "Writing the answer"]
GREY = "rgb(139, 149, 165)"  # --grey: stopped, rejected and ended cards
GREEN = "rgb(22, 163, 74)"  # --done

# Everything that sticks out of the viewport sideways, and every box that scrolls sideways
# although it is not meant to (only the chat list may, at phone width).
OVERFLOW = """() => {
    const width = document.documentElement.clientWidth;
    const out = [];
    const name = (e) => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '')
        + (e.className && typeof e.className === 'string' ? '.' + e.className.split(' ')[0] : '');
    for (const e of document.querySelectorAll('body *')) {
        const r = e.getBoundingClientRect();
        if (!r.width || !r.height) continue;
        const style = getComputedStyle(e);
        if (['auto', 'scroll'].includes(style.overflowX) && !e.matches('.chats')
            && e.scrollWidth > e.clientWidth + 1) out.push('scrolls sideways: ' + name(e));
        let clipped = false;
        for (let a = e.parentElement; a && a !== document.body; a = a.parentElement) {
            if (getComputedStyle(a).overflowX !== 'visible') { clipped = true; break; }
        }
        if (!clipped && (r.left < -1 || r.right > width + 1)) out.push('sticks out: ' + name(e));
    }
    if (document.documentElement.scrollWidth > width + 1) out.push('the page scrolls sideways');
    return out;
}"""

# Whether a click at the centre of #send reaches it (nothing covers it) and it is on screen.
SEND_REACHABLE = """() => {
    const b = document.querySelector('#send').getBoundingClientRect();
    const on = b.left >= 0 && b.top >= 0 && b.right <= innerWidth && b.bottom <= innerHeight;
    const hit = document.elementFromPoint(b.left + b.width / 2, b.top + b.height / 2);
    return on && !!hit && hit.closest('#send') !== null;
}"""


@pytest.fixture(params=["desktop", "phone"])
async def screen(daemon: Daemon, request: pytest.FixtureRequest) -> AsyncIterator[Page]:
    if request.param == "desktop":
        async with browse(daemon, DESKTOP) as pg:
            yield pg
    else:
        async with browse(daemon, PHONE, is_mobile=True, has_touch=True) as pg:
            yield pg


def _ids(history: list[dict[str, Any]]) -> list[list[str]]:
    return [list(s["titles"]) for s in history]


async def test_a_step_is_ticked_only_once_it_is_done(page: Page) -> None:
    await open_chat(page, "dm-alice")
    await watch_cards(page)
    user_id = await send(page, "Tick each step only when it is finished, please, slowly")
    card = card_after(page, user_id)
    await expect(card).to_have_attribute("data-status", "done")
    card_id = str(await card_row_after(page, user_id).get_attribute("data-message-id"))
    history = await seen(page, card_id)
    final = history[-1]
    assert final["titles"] == STEPS and final["marks"] == ["✓"] * 3, final
    for snap in history:  # the page: ✓ exactly for a done step, a spinner (no mark) while running
        for status, mark in zip(snap["steps"], snap["marks"], strict=True):
            assert (mark == "✓") == (status == "done"), snap
            assert status != "running" or mark == "", snap
    # The expert: "Writing the answer" runs while the answer streams and is ticked after it.
    streaming = [
        s
        for s in history
        if s["status"] == "running" and s["answer"] and s["answer"] != final["answer"]
    ]
    assert len(streaming) >= 2, "the answer did not stream"
    for snap in streaming:
        assert snap["titles"] == STEPS and snap["steps"] == ["done", "done", "running"], snap
    assert "✓" not in str(streaming[-1]["marks"][-1])


async def test_a_stopped_card_says_stopped_once(page: Page) -> None:
    await open_chat(page, "dm-bob")
    user_id = await send(page, "Please repeat this slowly: " + "stop me if you can " * 8)
    card = card_after(page, user_id)
    await expect(card.locator(".steps li[data-step-status='running']")).to_have_count(1)
    await card.locator("[data-action-id='stop']").click()
    await expect(card).to_have_attribute("data-status", "cancelled")
    # One status: the headline, and no second word for it beside it.
    await expect(card.locator(".card-head")).to_have_text("Stopped")
    await expect(card.locator(".pill")).to_have_count(0)
    # A step the stop interrupted did not fail: it is marked stopped, not ✗, and nothing spins.
    await expect(card.locator(".steps li[data-step-status='failed']")).to_have_count(0)
    await expect(card.locator(".steps li[data-step-status='running']")).to_have_count(0)
    stopped = card.locator(".steps li[data-step-status='cancelled']")
    await expect(stopped).to_have_count(1)
    await expect(stopped.locator(".mark")).to_have_text("–")
    assert "✗" not in await card.inner_text()
    border = await card.evaluate("c => getComputedStyle(c).borderTopColor")
    assert border == GREY, border


async def test_a_waiting_card_shows_its_question_and_status(page: Page) -> None:
    await open_chat(page, "dm-carol")
    user_id = await send(page, "Archive last year's tickets [confirm]")
    card = card_after(page, user_id)
    await expect(card).to_have_attribute("data-status", "waiting")
    await expect(card.locator(".card-title")).to_have_text("Please confirm: shall I go ahead?")
    await expect(card.locator(".pill")).to_have_text("Please confirm")
    await card.locator("[data-action-id='confirm']").click()
    await expect(card).to_have_attribute("data-status", "done")
    await expect(card.locator(".card-head")).to_have_text("Done")


async def test_confirm_keeps_the_steps_shown_before_the_question(page: Page) -> None:
    """Needs the runner to resume from the waiting card's state (the lead's part of issue 11)."""
    await open_chat(page, "dm-carol")
    await watch_cards(page)
    user_id = await send(page, "Rotate the API keys [confirm]")
    card = card_after(page, user_id)
    await expect(card).to_have_attribute("data-status", "waiting")
    await expect(card.locator(".steps li")).to_have_count(1)
    await expect(card.locator(".steps li .mark")).to_have_text("✓")
    await card.locator("[data-action-id='confirm']").click()
    await expect(card).to_have_attribute("data-status", "done")
    await expect(card.locator(".answer")).to_contain_text("Confirmed.")
    card_id = str(await card_row_after(page, user_id).get_attribute("data-message-id"))
    history = await seen(page, card_id)
    asked = next(i for i, s in enumerate(history) if s["status"] == "waiting")
    after = history[asked:]
    # The page shows the resumed run as it goes (it used to drop a card's updates until their
    # version, which the resumed run counts again, passed the waiting card's).
    thinking = [s for s in after if s["titles"][1:2] == STEPS[1:2] and s["steps"][1] == "running"]
    assert thinking, _ids(after)
    # Every state the card went through after the question still shows the first step, ticked.
    for snap in after:
        assert snap["titles"][:1] == STEPS[:1] and snap["marks"][:1] == ["✓"], _ids(after)
    assert after[-1]["titles"] == STEPS and after[-1]["marks"] == ["✓"] * 3, after[-1]


async def test_reject_ends_as_rejected_in_a_neutral_colour(page: Page) -> None:
    """Needs the runner to tell Progress the decision (``Progress.resumed("reject")``)."""
    await open_chat(page, "dm-carol")
    user_id = await send(page, "Drop the audit table [confirm]")
    card = card_after(page, user_id)
    await expect(card).to_have_attribute("data-status", "waiting")
    await card.locator("[data-action-id='reject']").click()
    await expect(card).to_have_attribute("data-status", "rejected")
    await expect(card.locator(".card-head")).to_have_text("Rejected")
    await expect(card.locator(".answer")).to_have_text("Rejected: nothing was done.")
    await expect(card.locator("[data-action-id='new']")).to_be_enabled()
    border = await card.evaluate("c => getComputedStyle(c).borderTopColor")
    assert border == GREY and border != GREEN, border
    assert "Done" not in await card.inner_text()


async def test_only_the_latest_card_of_a_conversation_takes_clicks(page: Page) -> None:
    await open_chat(page, "dm-alice")
    first = await send(page, "first question")
    await expect(card_after(page, first)).to_have_attribute("data-status", "done")
    second = await send(page, "second question")
    newer = card_row_after(page, second).locator(".card")
    await expect(newer).to_have_attribute("data-status", "done")
    older = card_after(page, first)
    await expect(older.locator("[data-action-id='new']")).to_be_disabled()
    await expect(older).to_have_attribute("data-stale", "true")
    await expect(newer.locator("[data-action-id='new']")).to_be_enabled()
    # The same after a reload, when the page is built from the API's list.
    await page.reload()
    await expect(page.locator("#conn")).to_have_attribute("data-state", "live")
    await open_chat(page, "dm-alice")
    await expect(card_after(page, first).locator("[data-action-id='new']")).to_be_disabled()
    await expect(
        card_row_after(page, second).locator(".card [data-action-id='new']")
    ).to_be_enabled()


async def test_the_page_works_at_phone_width(phone: Page) -> None:
    assert await phone.evaluate(OVERFLOW) == []
    assert await phone.evaluate(SEND_REACHABLE)
    await open_chat(phone, "dm-bob")  # the chat list is reachable (a row that scrolls)
    await phone.locator("#user").select_option("bob")
    user_id = await send(phone, "Hello from a phone: " + "a fairly long sentence " * 6)
    card = card_after(phone, user_id)
    await expect(card).to_have_attribute("data-status", "done")
    await expect(card.locator("[data-action-id='new']")).to_be_visible()
    assert await phone.evaluate(OVERFLOW) == []
    assert await phone.evaluate(SEND_REACHABLE)
    box = await card.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 375, box


async def test_an_error_toast_leaves_send_reachable(screen: Page) -> None:
    pg = screen
    await open_chat(pg, "dm-alice")
    composer = pg.locator("#composer")
    await composer.fill("x" * 20_001)  # the API refuses it: a toast with its error
    await pg.locator("#send").click()
    toast = pg.locator("#toast")
    await expect(toast).to_be_visible()
    await expect(toast).to_contain_text("text:")
    assert await pg.evaluate(SEND_REACHABLE)
    t, b = await toast.bounding_box(), await pg.locator("#send").bounding_box()
    assert t is not None and b is not None
    apart = t["y"] + t["height"] <= b["y"] or b["y"] + b["height"] <= t["y"]
    assert apart or t["x"] + t["width"] <= b["x"] or b["x"] + b["width"] <= t["x"], (t, b)
    # While the toast is up, a corrected message is sent (Playwright refuses covered buttons).
    shorter = f"a shorter message {uuid.uuid4().hex[:8]}"
    await composer.fill(shorter)
    await pg.locator("#send").click()
    await expect(pg.locator("[data-role='user']", has_text=shorter)).to_be_visible()
    await toast.click()  # and it goes when clicked
    await expect(toast).to_be_hidden()


async def test_the_page_has_a_favicon(page: Page) -> None:
    icon = await page.evaluate("""async () => {
        const link = document.querySelector('link[rel~="icon"]');
        if (!link) return null;
        const res = await fetch(link.href);
        return {status: res.status, type: res.headers.get('content-type'),
                body: (await res.text()).slice(0, 5)};
    }""")
    assert icon == {"status": 200, "type": "image/svg+xml", "body": "<svg "}, icon
