"""Confirm / Reject on Lark (issue 25): a signed card callback from another group member than
the asker gets a warning toast saying who may answer, the card stays as it was and the run does
not resume; the asker's click then resumes it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.fakes.lark import FakeLark
from tests.support.lark import (
    answer,
    bot_mention,
    card_click,
    final_card,
    message_event,
    reply_to,
)
from tests.support.waits import eventually


async def test_a_lark_confirm_by_another_member_gets_a_toast_and_does_not_resume(
    make_lark: Callable[..., Any], fake: FakeLark
) -> None:
    lark = await make_lark()
    group = {"chat_id": "oc_group1", "chat_type": "group", "mentions": [bot_mention()]}
    await lark.post(message_event("@_user_1 [confirm] deploy", message_id="om_a1", **group))
    waiting = await eventually(final_card(fake, "om_a1", "Please confirm: shall I go ahead?"))
    values = {
        e["behaviors"][0]["value"]["action"]: e["behaviors"][0]["value"]
        for e in waiting["body"]["elements"]
        if e["tag"] == "button"
    }
    card_id = reply_to(fake, "om_a1")[0]
    by_bob = card_click(
        values["confirm"], message_id=card_id, chat_id="oc_group1", operator="ou_bob"
    )
    status, body = await lark.post(by_bob)
    # A warning toast for bob alone; the card is not changed (no "card" in the answer).
    assert status == 200 and body["toast"]["type"] == "warning", body
    assert "who asked" in body["toast"]["content"] and "card" not in body
    status, body = await lark.post(
        card_click(values["confirm"], message_id=card_id, chat_id="oc_group1")
    )
    assert status == 200 and body["toast"]["content"] == "Confirmed"
    fake.apply_callback(card_id, body)
    assert len(reply_to(fake, "om_a1")) == 1
    done = await eventually(final_card(fake, "om_a1"))
    assert "deploy" in answer(done)


async def test_a_confirm_card_goes_out_only_once_its_interrupt_is_stored(
    make_lark: Callable[..., Any], fake: FakeLark, redis_client: Any, prefix: str
) -> None:
    """A click on Confirm is checked against the stored interrupt: were the card shown first, a
    quick click by someone else would pass intake's check and get a "Confirmed" toast."""
    stored_when_shown: list[bool] = []

    async def watch(call: Any) -> None:
        if "Please confirm" in json.dumps(call.body or {}, ensure_ascii=False):
            pending = [
                await redis_client.hget(key, "interrupt")
                async for key in redis_client.scan_iter(f"{prefix}*binding*")
            ]
            stored_when_shown.append(any(pending))

    fake.watchers.append(watch)
    lark = await make_lark()
    await lark.post(message_event("[confirm] deploy", message_id="om_a2"))
    await eventually(final_card(fake, "om_a2", "Please confirm: shall I go ahead?"))
    assert stored_when_shown and all(stored_when_shown), stored_when_shown
