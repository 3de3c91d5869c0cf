"""A huge answer on WeCom (issue 38), app mode: past ``maxAnswerParts`` markdown messages (here
set to 3) it arrives as one ``file`` message, answer.md, uploaded as temporary media; the chat
gets one markdown message with the answer's head and a note."""

from __future__ import annotations

import aiohttp

from tests.fakes.wecom import FakeWeCom
from tests.support.helpers import InProcessGateway
from tests.support.waits import eventually
from tests.support.wecom import app_message, encrypt_xml, post, start_gateway, url

ECHO = {"id": "echo", "kind": "echo", "stepDelayMs": 0, "charDelayMs": 0, "chunkChars": 4}


async def test_an_answer_past_max_answer_parts_arrives_as_answer_md(
    gateways: list[InProcessGateway], prefix: str, fake: FakeWeCom
) -> None:
    gw = await start_gateway(prefix, fake, "app", expert=ECHO, maxAnswerParts=3)
    gateways.append(gw)
    text = "\n".join(f"line {i} " + "x" * 90 for i in range(80))  # 8 KB: past 3 x 2,048 bytes
    expected = "You said:\n" + "\n".join(f"> {line}" for line in text.splitlines())
    query, body = encrypt_xml(app_message("alice", text, "9501"))
    async with aiohttp.ClientSession() as http:
        status, _ = await post(http, url(gw), query, body)
    assert status == 200

    def filed() -> dict[str, object] | None:
        return next((m for m in fake.sent if m["msgtype"] == "file"), None)

    file = await eventually(filed, timeout=30)
    await gw.idle()
    media_id = file["file"]["media_id"]  # type: ignore[index]
    assert fake.uploads[media_id] == ("file", "answer.md")
    assert fake.media[media_id][0].decode() == expected
    [markdown] = [m["markdown"]["content"] for m in fake.sent if m["msgtype"] == "markdown"]
    assert "answer.md" in markdown
    assert markdown.split("\n\n…")[0] in expected
    assert fake.sent.index(markdown_message(fake)) < fake.sent.index(file)  # the head first


def markdown_message(fake: FakeWeCom) -> dict[str, object]:
    return next(m for m in fake.sent if m["msgtype"] == "markdown")
