"""Knowledge-base citations on DingTalk (issue 28 item 3): the fake XpertAI's "[kb]" run cites
with ``xpert://knowledgebase/chunk?…`` links (knowledgebase/citation.ts:33-74); the robot
message shows footnote markers and the sources, and nothing sent to DingTalk holds a link."""

from __future__ import annotations

import json

from tests.fakes.dingtalk import FakeDingTalk
from tests.fakes.xpertai import FakeXpertAI
from tests.support.dingtalk import robot_message, start_harness
from tests.support.helpers import serve
from tests.support.waits import eventually
from tests.support.xpert import CITED, xpert_expert


async def test_a_dingtalk_answer_shows_footnotes_and_sources(prefix: str) -> None:
    xpert = FakeXpertAI(keepalive_s=0.2)
    fake = FakeDingTalk()
    await fake.start()
    async for url in serve(xpert.app()):
        _gw, harness = await start_harness(
            prefix, fake, experts=[xpert_expert(url + "/api/ai")], xpertId="sales"
        )
        try:
            status, _ = await harness.post(robot_message(fake, "how long do refunds take? [kb]"))
            assert status == 200

            def answered() -> str | None:
                texts = [m["text"] for m in fake.sent() if "Sources" in m.get("text", "")]
                return texts[-1] if texts else None

            text = await eventually(answered)
            assert text.rstrip().endswith(CITED), text
            written = [c.body for c in fake.calls]
            assert "xpert://" not in json.dumps(written, ensure_ascii=False)
            [run] = xpert.runs.values()  # the fake did send the raw links
            assert "xpert://knowledgebase" in json.dumps(run.stream.log, ensure_ascii=False)
        finally:
            await harness.close()
    await fake.stop()
