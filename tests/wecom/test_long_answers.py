"""WeCom AI bot callbacks: a 60 KB answer arrives whole as the stream, the response_url and the
user's ``more`` (the long connection's parts are tested with every platform's:
tests/conformance/test_long_answers.py)."""

from __future__ import annotations

import re
from typing import Any

import aiohttp

from tests.fakes.wecom import FakeWeCom
from tests.support.waits import eventually
from tests.support.wecom import (
    aibot_message,
    decrypt_reply,
    encrypt_json,
    post,
    start_gateway,
    url,
)

FAST_ECHO = {"id": "echo", "kind": "echo", "stepDelayMs": 0, "charDelayMs": 0, "chunkChars": 10_000}
MARK = re.compile(r"\n\n\((\d+)/(\d+)\)$")


def long_text() -> str:
    return "\n".join(f"line {i}: " + "长答案" * (i % 9) for i in range(2_600))


async def test_a_60_kb_answer_in_callback_mode_arrives_whole_stream_response_url_then_more(
    gateways: list[Any], prefix: str, fake: FakeWeCom
) -> None:
    """AI-bot callbacks: the stream holds part (1/n), the message's one ``response_url`` call
    part (2/n) (doc 101138: one call per response_url), and each ``more`` the user sends is
    answered with the next part as its own stream, without a turn; nothing is cut."""
    gw = await start_gateway(prefix, fake, "aibot", expert=FAST_ECHO)
    gateways.append(gw)
    text = long_text()
    message = aibot_message(
        "cb-long", "text", {"content": text}, response_url=fake.response_url("cb-long")
    )
    async with aiohttp.ClientSession() as http:

        async def send(body: dict[str, Any]) -> dict[str, Any]:
            query, data = encrypt_json(body)
            status, reply = await post(http, url(gw), query, data)
            assert status == 200, reply
            stream: dict[str, Any] = decrypt_reply(reply)["stream"]
            return stream

        stream_id = (await send(message))["id"]
        refresh = {"msgid": "poll", "msgtype": "stream", "stream": {"id": stream_id}}

        async def finished() -> dict[str, Any] | None:
            got = await send({**refresh, "from": {"userid": "alice"}})
            return got if got["finish"] else None

        first = await eventually(finished, timeout=30, interval=0.1)
        await eventually(lambda: fake.responses, timeout=15)
        [second] = fake.responses
        assert second["id"] == "cb-long" and second["msgtype"] == "markdown"
        got = [first["content"], second["markdown"]["content"]]
        n = int(MARK.search(first["content"])[2])  # type: ignore[index]
        assert n >= 3
        for i in range(3, n + 1):
            more = aibot_message(f"more-{i}", "text", {"content": "more"})
            reply = await send(more)
            assert reply["finish"] is True
            got.append(reply["content"])
            if i == 3:  # WeCom retrying the same message gets the same part, no other
                assert (await send(more))["content"] == reply["content"]
    note = re.compile(r"\n\n_Reply \*\*more\*\* for part (\d+)/(\d+)\._$")
    for i, part in enumerate(got, start=1):
        assert len(part.encode()) <= 20_480
        if i < n and i > 1:
            assert note.search(part).groups() == (str(i + 1), str(n))  # type: ignore[union-attr]
        bare = note.sub("", part)
        assert MARK.search(bare)[0] == f"\n\n({i}/{n})"  # type: ignore[index]
    whole = "".join(MARK.sub("", note.sub("", p)) for p in got)
    expected = "You said:\n" + "\n".join(f"> {line}" for line in text.splitlines())
    assert whole.endswith("\n\n" + expected) and "…" not in whole
    assert len(fake.responses) == 1  # the response_url once; the later parts on "more"
    await gateways.idle()
    # Nothing waits any more: "more" is a message like any other, answered by the expert.
    async with aiohttp.ClientSession() as http:
        query, data = encrypt_json(aibot_message("more-x", "text", {"content": "more"}))
        status, reply = await post(http, url(gw), query, data)
        assert status == 200
        plain = {"msgid": "poll", "msgtype": "stream", "from": {"userid": "alice"}}
        plain["stream"] = {"id": decrypt_reply(reply)["stream"]["id"]}

        async def echoed() -> bool:
            query, data = encrypt_json(plain)
            _, answer = await post(http, url(gw), query, data)
            return bool(decrypt_reply(answer)["stream"]["content"].endswith("You said:\n> more"))

        await eventually(echoed, timeout=15, interval=0.1)
