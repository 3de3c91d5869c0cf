"""The console shows an answer's Markdown as the platforms' cards do (headings, emphasis, code,
lists, links, tables, quotes), in headless Chromium against a real daemon: the echo expert
quotes a Markdown message back, and the card renders it. Markup in the text stays text, and a
link is made only of an http(s) URL."""

from __future__ import annotations

import pytest

from tests.support.console_browser import Page, card_after, daemon, expect, open_chat, page

__all__ = ["daemon", "page"]  # fixtures
pytestmark = [pytest.mark.browser, pytest.mark.slow]

MESSAGE = """\
# Release plan
**bold words**, *slanted*, `make test` and ~~struck~~
- first point
- second point
1. step one
2. step two
See [the docs](https://example.com/docs) or [this](javascript:alert(1)) <b>not bold</b>
| name | value |
|------|-------|
| a    | 1     |
```
code <i>block</i>
```"""


async def test_an_answers_markdown_is_rendered_and_its_markup_stays_text(page: Page) -> None:
    await open_chat(page, "dm-alice")
    sent = await page.evaluate(
        """async (text) => {
            const res = await fetch('/console/api/messages', {method: 'POST',
              headers: {'Content-Type': 'application/json'},
              body: JSON.stringify({integrationId: 'console', chatId: 'dm-alice',
                chatType: 'p2p', senderId: 'alice', text})});
            return (await res.json()).eventId;
        }""",
        MESSAGE,
    )
    assert sent
    user = page.locator("[data-role='user']", has_text="Release plan").last
    await expect(user).to_be_visible()
    card = card_after(page, str(await user.get_attribute("data-message-id")))
    await expect(card).to_have_attribute("data-status", "done")
    quoted = card.locator(".answer blockquote")  # the echo expert quotes the message
    await expect(quoted.locator(".heading")).to_have_text("Release plan")
    await expect(quoted.locator("strong")).to_have_text("bold words")
    await expect(quoted.locator("em")).to_have_text("slanted")
    await expect(quoted.locator("p code")).to_have_text("make test")
    await expect(quoted.locator("del")).to_have_text("struck")
    await expect(quoted.locator("ul > li")).to_have_text(["first point", "second point"])
    await expect(quoted.locator("ol > li")).to_have_text(["step one", "step two"])
    link = quoted.locator("a")
    await expect(link).to_have_count(1)
    await expect(link).to_have_text("the docs")
    await expect(link).to_have_attribute("href", "https://example.com/docs")
    await expect(link).to_have_attribute("rel", "noopener noreferrer")
    await expect(quoted.locator("th")).to_have_text(["name", "value"])
    await expect(quoted.locator("td")).to_have_text(["a", "1"])
    await expect(quoted.locator("pre code")).to_have_text("code <i>block</i>")
    # Markup and a javascript: link are shown as the text they are, never made into elements.
    await expect(quoted).to_contain_text("[this](javascript:alert(1)) <b>not bold</b>")
    await expect(card.locator(".answer b, .answer i, .answer script")).to_have_count(0)
    # No Markdown syntax left over where it was rendered.
    text = await quoted.inner_text()
    assert "**" not in text and "# Release" not in text and "|---" not in text
