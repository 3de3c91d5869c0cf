"""WeCom AI bot over the long connection: a 60 KB answer arrives whole, the stream as part (1/n)
(at most 20,480 bytes, WeCom's stream limit) and the rest as markdown messages (2/n)..(n/n),
nothing refused by the fake, each part once."""

from __future__ import annotations

import re
from typing import Any

from tests.fakes.wecom import FakeWeCom
from tests.support.waits import eventually
from tests.support.wecom import aibot_message, start_gateway

FAST_ECHO = {"id": "echo", "kind": "echo", "stepDelayMs": 0, "charDelayMs": 0, "chunkChars": 10_000}
MARK = re.compile(r"\n\n\((\d+)/(\d+)\)$")


def long_text() -> str:
    return "\n".join(f"line {i}: " + "长答案" * (i % 9) for i in range(2_600))


def markdown_sent(fake: FakeWeCom) -> list[str]:
    return [
        f["body"]["markdown"]["content"]
        for f in fake.frames
        if f.get("cmd") == "aibot_send_msg" and f["body"].get("msgtype") == "markdown"
    ]


async def test_a_60_kb_answer_arrives_whole_in_numbered_parts(
    gateways: list[Any], prefix: str, fake: FakeWeCom
) -> None:
    gw = await start_gateway(prefix, fake, "aibot_ws", expert=FAST_ECHO)
    gateways.append(gw)
    await eventually(lambda: fake.subscribes == 1)
    text = long_text()
    assert len(text.encode()) > 60_000
    body = aibot_message("w-long", "text", {"content": text}, user="alice", create_time=1700000000)
    await fake.push("aibot_msg_callback", body, "req-long")

    def parts() -> list[str] | None:
        frames = fake.stream_frames("req-long")
        if not frames or not frames[-1]["body"]["stream"]["finish"]:
            return None
        got = [frames[-1]["body"]["stream"]["content"], *markdown_sent(fake)]
        last = MARK.search(got[-1])
        return got if last and len(got) == int(last[2]) else None

    got = await eventually(parts, timeout=30)
    n = len(got)
    assert n >= 3
    for i, part in enumerate(got, start=1):
        assert MARK.search(part) and MARK.search(part)[0] == f"\n\n({i}/{n})"  # type: ignore[index]
        assert len(part.encode()) <= 20_480
    whole = "".join(MARK.sub("", p) for p in got)
    expected = "You said:\n" + "\n".join(f"> {line}" for line in text.splitlines())
    assert whole.endswith("\n\n" + expected) and whole.startswith("- ")  # the steps, then it
    assert [a for a in fake.ws.acks if a["errcode"]] == []
    await gateways.idle()
    assert len(markdown_sent(fake)) == n - 1, "each part once"
