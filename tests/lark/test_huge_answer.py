"""Lark end to end (issue 38): a 2 MB answer streamed in 4-character deltas while other chats'
webhooks keep coming. Those are answered meanwhile, each with its own card; the huge answer
arrives as one file, answer.md, whole, and its card shows the head and says so, instead of
dozens of text messages. (The file past ``maxAnswerParts`` on every platform:
tests/conformance/test_huge_answer.py; this is Lark's streaming of 2 MB under load.)"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from tests.fakes.lark import FakeLark
from tests.support.helpers import InProcessGateway
from tests.support.lark import LarkHarness, answer, lark_config, message_event, reply_to
from tests.support.waits import eventually

ECHO = {"id": "echo", "kind": "echo", "stepDelayMs": 0, "charDelayMs": 0, "chunkChars": 4}
LINE = "línea " + "y" * 194  # 200 characters, one of them two bytes in UTF-8


@pytest.fixture
async def lark(fake: FakeLark, prefix: str) -> AsyncIterator[LarkHarness]:
    config = lark_config(prefix, fake, updateIntervalMs=200)
    config["experts"] = [ECHO]
    gw = InProcessGateway(config)
    await gw.start()
    harness = LarkHarness(fake, gw)
    yield harness
    await harness.close()


def filed(fake: FakeLark, message_id: str) -> tuple[bytes, str, str] | None:
    for m in reply_to(fake, message_id):
        if fake.messages[m]["msg_type"] == "file":
            return fake.files[json.loads(fake.messages[m]["content"])["file_key"]]
    return None


async def test_a_2_mb_answer_streams_while_webhooks_are_answered_and_arrives_as_a_file(
    lark: LarkHarness, fake: FakeLark
) -> None:
    text = "\n".join([LINE] * 50) + " [repeat 200]"
    quoted = "You said:\n" + "\n".join(f"> {line}" for line in text.splitlines())
    expected = "\n\n".join([quoted] * 200)
    assert len(expected.encode()) > 2_000_000
    status, _ = await lark.post(message_event(text, chat_id="oc_huge", message_id="om_huge"))
    assert status == 200

    probes: list[tuple[str, int]] = []
    n = 0
    while filed(fake, "om_huge") is None:
        n += 1
        assert n < 2_000, "the huge answer never arrived"
        status, _ = await lark.post(
            message_event(f"probe {n}", chat_id=f"oc_probe{n}", message_id=f"om_probe{n}")
        )
        probes.append((f"om_probe{n}", status))
        await asyncio.sleep(0)
    # Webhooks were answered while the answer streamed, and their turns ran meanwhile.
    assert len(probes) >= 3
    assert all(status == 200 for _, status in probes)

    def probe_cards_done() -> bool:
        for message_id, _ in probes:
            replies = reply_to(fake, message_id)
            if not replies or fake.card_of(replies[0])["header"]["title"]["content"] != "Done":
                return False
        return True

    await eventually(probe_cards_done, timeout=60)

    data, file_type, name = filed(fake, "om_huge") or (b"", "", "")
    assert (name, file_type) == ("answer.md", "stream")
    assert data.decode() == expected  # the whole answer, once
    await lark.idle()
    replies = reply_to(fake, "om_huge")
    kinds = [fake.messages[m]["msg_type"] for m in replies]
    assert kinds == ["interactive", "file"]  # no text parts
    card = fake.card_of(replies[0])
    assert card["header"]["title"]["content"] == "Done"
    shown = answer(card)
    assert shown.startswith(quoted[:1000])
    assert "answer.md" in shown
    assert len(shown.encode()) < 10_000
    assert [r for r in fake.refusals if "/contact/" not in r[0]] == []
