"""A long answer arrives whole, on every platform in every mode: a 60 KB answer is split into
parts marked (1/n)..(n/n), each within the platform's part size, which joined are the answer;
the platform refuses nothing and each part is sent once. (Past ``maxAnswerParts`` an answer is a
file where the platform takes one: test_huge_answer.py; the parts are what is tested here.)"""

from __future__ import annotations

import re

from tests.support.conformance import Harness
from tests.support.conformance.base import FAST_ECHO

MARK = re.compile(r"\n\n\((\d+)/(\d+)\)$")


def long_text() -> str:
    lines = [f"line {i}: " + "长答案" * (i % 9) + " | a | b |" * (i % 3) for i in range(2_600)]
    return "\n".join(lines)


async def test_a_60_kb_answer_arrives_whole_in_numbered_parts(platform_mode: Harness) -> None:
    platform = platform_mode
    await platform.start(experts=[FAST_ECHO], maxAnswerParts=100)
    text = long_text()
    assert len(text.encode()) > 60_000
    sent = await platform.send(text)
    answer = await platform.answer(sent, timeout=60)

    n = len(answer.parts)
    assert n >= 3
    for i, part in enumerate(answer.parts, start=1):
        found = MARK.search(part)
        assert found and found[0] == f"\n\n({i}/{n})", part[-40:]
        limit, chars = platform.part_bytes(), platform.part_chars()
        assert limit is None or len(part.encode()) <= limit
        assert chars is None or len(part) <= chars
    whole = "".join(MARK.sub("", p) for p in answer.parts)
    expected = "You said:\n" + "\n".join(f"> {line}" for line in text.splitlines())
    assert whole.endswith(expected)  # after the steps, where the stream shows them
    assert platform.refused() == []
    await platform.idle()
    assert platform.seen(sent) == answer
    shown = platform.shown()
    assert all(shown.count(part) == 1 for part in answer.parts[1:]), "each part sent once"
