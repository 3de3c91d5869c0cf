"""WeCom AI bot, long connection (issue 38): an answer past ``maxAnswerParts`` stream-sized parts
is the file answer.md. The stream shows the answer's head and says so; the whole answer is
uploaded on the connection (``aibot_upload_media_init`` / ``_chunk`` / ``_finish``, the fake
checking sizes and the MD5) and sent once as a ``file`` message (``aibot_send_msg``), with no
markdown parts. In callback mode, where the bot has no way to send a file, the answer still
goes in parts (tests/wecom/test_long_answers.py)."""

from __future__ import annotations

from typing import Any

from adapters.wecom.cards import STREAM_BYTES
from tests.fakes.wecom import FakeWeCom
from tests.support.waits import eventually
from tests.support.wecom import aibot_message, start_gateway

ECHO = {"id": "echo", "kind": "echo", "stepDelayMs": 0, "charDelayMs": 0, "chunkChars": 10_000}
LINE = "línea " + "长" * 30 + "y" * 64  # 100 characters, 150 bytes in UTF-8


def sent(fake: FakeWeCom, msgtype: str) -> list[dict[str, Any]]:
    return [
        f["body"]
        for f in fake.frames
        if f.get("cmd") == "aibot_send_msg" and f["body"].get("msgtype") == msgtype
    ]


async def test_a_huge_answer_arrives_as_answer_md_over_the_long_connection(
    gateways: list[Any], prefix: str, fake: FakeWeCom
) -> None:
    parts = 2
    gw = await start_gateway(prefix, fake, "aibot_ws", expert=ECHO, maxAnswerParts=parts)
    gateways.append(gw)
    await eventually(lambda: fake.subscribes == 1)
    text = "\n".join([LINE] * 100) + " [repeat 8]"  # about 8 x 15 KB: over 2 x 20 KB
    quoted = "You said:\n" + "\n".join(f"> {line}" for line in text.splitlines())
    whole = "\n\n".join([quoted] * 8)
    assert len(whole.encode()) > parts * STREAM_BYTES * 2
    body = aibot_message("w-huge", "text", {"content": text}, user="alice", create_time=1700000000)
    await fake.push("aibot_msg_callback", body, "req-huge")

    files = await eventually(lambda: sent(fake, "file") or None, timeout=30)
    await gateways.idle()
    [message] = sent(fake, "file")
    data, name, kind = fake.ws.media[message["file"]["media_id"]]
    assert (name, kind) == ("answer.md", "file")
    assert data.decode() == whole  # the whole answer, once
    assert len(files) == 1
    assert sent(fake, "markdown") == []  # no parts
    frames = fake.stream_frames("req-huge")
    last = frames[-1]["body"]["stream"]
    assert last["finish"] and "answer.md" in last["content"]
    assert last["content"].count("You said:") == 1  # the head only
    uploads = [f for f in fake.frames if str(f.get("cmd", "")).startswith("aibot_upload_media")]
    cmds = [f["cmd"] for f in uploads]
    assert cmds[0] == "aibot_upload_media_init" and cmds[-1] == "aibot_upload_media_finish"
    assert [a for a in fake.ws.acks if a["errcode"]] == []
