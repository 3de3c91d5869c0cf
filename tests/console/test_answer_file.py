"""An answer too long for the console (issue 38): past ``maxAnswerParts`` parts the card shows
its head and says the whole answer is in answer.md, and the transcript offers answer.md as a
download, served by the console's own API (same host checks as the rest of it). A shorter
answer stays whole in its card, with no file."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiohttp

from adapters.console.outbound import PART_BYTES
from tests.support.configs import base_config

ECHO = {"id": "echo", "kind": "echo", "stepDelayMs": 0, "charDelayMs": 0, "chunkChars": 64}
LINE = "línea " + "y" * 94  # 100 characters, one of them two bytes in UTF-8


def config(prefix: str, parts: int) -> dict[str, Any]:
    cfg = base_config(prefix, maxAnswerParts=parts)
    cfg["experts"] = [ECHO]
    return cfg


async def test_a_long_answer_is_a_download_in_the_transcript_and_its_head_in_the_card(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    parts = 3
    console = await make_gateway(config(prefix, parts))
    text = "\n".join([LINE] * 20) + " [repeat 20]"  # an answer of about 40 KB
    quoted = "You said:\n" + "\n".join(f"> {line}" for line in text.splitlines())
    whole = "\n\n".join([quoted] * 20)
    assert len(whole.encode()) > parts * PART_BYTES
    await console.send(text)
    [card] = await console.wait_cards(timeout=30)
    await console.idle()
    shown = card["card"]["answer"]
    assert shown.startswith(quoted[:1000]) and "answer.md" in shown
    assert len(shown.encode()) < len(whole.encode()) // 4
    files = [m for m in await console.messages() if m.get("type") == "file"]
    assert len(files) == 1, files
    [record] = files
    assert record["file"]["name"] == "answer.md"
    assert record["file"]["bytes"] == len(whole.encode())
    async with aiohttp.ClientSession() as http:
        async with http.get(console.base + record["file"]["url"]) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/markdown")
            assert "answer.md" in resp.headers["Content-Disposition"]
            assert (await resp.read()).decode() == whole  # the whole answer, once
        # a file id of another chat, or one never made, is not there; no 500
        other = record["file"]["url"].replace("/chats/dm-alice/", "/chats/dm-bob/")
        for url in (other, record["file"]["url"].replace("/files/", "/files/x"), "/../x"):
            async with http.get(console.base + url) as resp:
                assert resp.status in (400, 404), url


async def test_an_answer_within_the_parts_stays_whole_in_its_card(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway(config(prefix, 10))
    await console.send("\n".join([LINE] * 20) + " [repeat 5]")  # about 10 KB
    [card] = await console.wait_cards(timeout=30)
    await console.idle()
    assert "answer.md" not in card["card"]["answer"]
    assert card["card"]["answer"].count("You said:") == 5
    assert [m for m in await console.messages() if m.get("type") == "file"] == []
