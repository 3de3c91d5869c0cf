"""A huge answer on every platform (issue 38): past ``maxAnswerParts`` parts (3 here) of the
platform's part size, where the platform declares it, the answer arrives as one file, answer.md,
whole, and the chat gets one message with the answer's head and a note naming the file, not a
message per part. Where it does not (a mode that sends no files), every part is sent."""

from __future__ import annotations

import re

from gateway.edge.capabilities import Capability
from tests.support.conformance import Harness
from tests.support.conformance.base import FAST_ECHO

LINE = "línea " + "第" * 2 + "y" * 192  # 200 characters, three of them more than a byte
MARK = re.compile(r"\n\n\((\d+)/(\d+)\)$")


async def test_an_answer_past_max_answer_parts_arrives_as_answer_md(platform: Harness) -> None:
    await platform.start(experts=[FAST_ECHO], maxAnswerParts=3)
    one = "\n".join([LINE] * 50)
    part = max(platform.part_bytes() or 0, platform.part_chars() or 0)
    repeat = 1 + 4 * part // len(one.encode())  # past 3 parts, whatever the part size
    text = f"{one} [repeat {repeat}]"
    quoted = "You said:\n" + "\n".join(f"> {line}" for line in text.splitlines())
    expected = "\n\n".join([quoted] * repeat)
    answer = await platform.answer(await platform.send(text), timeout=60)

    if platform.can(Capability.LONG_ANSWER_FILE):
        [(name, data)] = platform.files()
        assert name == "answer.md" and data.decode() == expected  # the whole answer, once
        [head] = answer.parts  # the head, once: not a message per part
        assert "answer.md" in head
        shown = head.split("\n\n…")[0]
        shown = shown[shown.index("You said:") :]  # after the steps, where a stream shows them
        assert shown in expected and len(shown) > 1000
    else:
        assert platform.files() == []
        n = len(answer.parts)
        assert n > 3
        assert all(MARK.search(p)[0] == f"\n\n({i}/{n})" for i, p in enumerate(answer.parts, 1))  # type: ignore[index]
        assert "".join(MARK.sub("", p) for p in answer.parts).endswith(expected)
    assert platform.refused() == []
