"""Knowledge-base citations on every platform (issue 28 item 3): the fake XpertAI's "[kb]" run
cites with ``xpert://knowledgebase/chunk?…`` links (knowledgebase/citation.ts:33-74); the chat
shows footnote markers and the sources, and nothing sent to the platform holds a link."""

from __future__ import annotations

import json

from tests.fakes.xpertai import FakeXpertAI
from tests.support.conformance import Harness
from tests.support.xpert import CITED, xpert_expert


async def test_an_answer_shows_footnotes_and_sources_and_no_link(
    platform: Harness, xpert: tuple[FakeXpertAI, str]
) -> None:
    fake, url = xpert
    await platform.start(experts=[xpert_expert(url)], xpertId="sales")
    answer = await platform.answer(await platform.send("how long do refunds take? [kb]"))
    assert answer.parts[-1].rstrip().endswith(CITED), answer.parts
    assert "xpert://" not in platform.written()
    [run] = fake.runs.values()  # the fake did send the raw links
    assert "xpert://knowledgebase" in json.dumps(run.stream.log, ensure_ascii=False)
