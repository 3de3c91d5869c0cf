"""A huge answer on DingTalk (issue 38): past ``maxAnswerParts`` robot messages it arrives as
one file. ``/media/upload`` and ``sampleFile`` take no ``.md`` (DOC:upload-media-files,
DOC:robot-message-type), so the whole answer goes as ``answer.zip`` holding ``answer.md``; the
chat gets the answer's head and a note, not dozens of messages."""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

from tests.fakes.dingtalk import SEND_PATHS
from tests.support.dingtalk import robot_message, running
from tests.support.waits import eventually

ECHO = {"id": "echo", "kind": "echo", "stepDelayMs": 0, "charDelayMs": 0, "chunkChars": 4}
LINE = "第" + "y" * 199


async def test_a_huge_answer_arrives_as_answer_zip_holding_answer_md(
    prefix: str, redis_client: Any
) -> None:
    text = "\n".join([LINE] * 50) + " [repeat 6]"
    quoted = "You said:\n" + "\n".join(f"> {line}" for line in text.splitlines())
    expected = "\n\n".join([quoted] * 6)  # 60 KB: past 10 messages of 3,400 characters
    async with running(prefix, experts=[ECHO], xpertId="echo") as (fake, harness):
        status, _ = await harness.post(robot_message(fake, text))
        assert status == 200

        def filed() -> dict[str, Any] | None:
            for c in fake.calls:
                if c.path in SEND_PATHS and c.status < 300 and c.body["msgKey"] == "sampleFile":
                    return dict(json.loads(c.body["msgParam"]))
            return None

        param = await eventually(filed, 30)
        await harness.idle()
        texts = [m["text"] for m in fake.sent() if m.get("text")]
    assert (param["fileName"], param["fileType"]) == ("answer.zip", "zip")
    kind, name, data = fake.media[param["mediaId"]]
    assert (kind, name) == ("file", "answer.zip")
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.namelist() == ["answer.md"]
        assert archive.read("answer.md").decode() == expected
    answers = [t for t in texts if "You said" in t]
    assert len(answers) == 1  # the head, once: not a message per part
    assert "answer.md" in answers[0]
    assert answers[0].split("\n\n…")[0] in expected
