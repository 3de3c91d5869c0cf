"""Confirm / Reject on Lark (issue 25): the card goes out only once its interrupt is stored. (Who
may click, in groups and direct chats: tests/conformance/test_approvers.py.)"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.fakes.lark import FakeLark
from tests.support.lark import (
    final_card,
    message_event,
)
from tests.support.waits import eventually


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
