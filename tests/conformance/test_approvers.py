"""Confirm / Reject on every platform (issue 25): the echo expert's ``[confirm]`` interrupts the
run until someone answers. Where the platform declares buttons the asker (in a direct chat) or,
in a group, the asker and the chat's ``approvers`` click Confirm; another member cannot (no
button of theirs, or a click that is refused and changes nothing) and the run waits on. Where
it declares none, the asker types the answer. (DingTalk's 1:1 delivery of a group's links, and
Lark's card shown only once its interrupt is stored: tests/dingtalk/test_approvers.py,
tests/lark/test_approvers.py.)"""

from __future__ import annotations

import pytest

from gateway.edge.capabilities import Capability
from tests.support.conformance import Harness, NoButton
from tests.support.waits import eventually

PROMPT = "Please confirm: shall I go ahead?"
WORD = "zebra"  # in the resumed answer only


def resumed(platform: Harness) -> bool:
    return any(WORD in text for text in platform.shown())


async def test_the_asker_confirms_in_a_direct_chat(platform: Harness) -> None:
    await platform.start()
    sent = await platform.send(f"[confirm] {WORD}")
    waiting = await platform.answer(sent)
    assert PROMPT in f"{waiting.title}\n{waiting.text}", waiting
    assert not resumed(platform)
    if platform.can(Capability.BUTTONS):
        assert {"Confirm", "Reject"} <= set(waiting.buttons)
        _, told = await platform.click(sent, "Confirm")
        assert "Confirmed" in told or told == ""
        await eventually(lambda: resumed(platform))
    else:  # no buttons to answer with: the chat is not stuck, the next message is answered
        assert not {"Confirm", "Reject"} & set(waiting.buttons)
        answered = await platform.answer(await platform.send("next"))
        assert "next" in answered.text


async def test_in_a_group_the_asker_or_an_approver_confirms_and_nobody_else(
    platform: Harness,
) -> None:
    await platform.start(approvers=[platform.user_id("carol")])
    if not platform.can(Capability.GROUP_BUTTONS):
        pytest.skip(f"{platform.id} declares no buttons in groups")
    sent = await platform.send(f"[confirm] {WORD}", user="alice", group=True)
    waiting = await platform.answer(sent)
    assert PROMPT in f"{waiting.title}\n{waiting.text}", waiting
    try:
        _, told = await platform.click(sent, "Confirm", user="bob")
    except NoButton:
        told = ""  # bob was given no button
    else:
        assert "who asked" in told, told  # a warning for bob alone
    await platform.idle()
    assert not resumed(platform)
    _, told = await platform.click(sent, "Confirm", user="carol")
    assert "Confirmed" in told
    await eventually(lambda: resumed(platform))
