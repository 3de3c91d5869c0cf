"""Ids that hold the key separators (issue 25): a chat ``team2:dedup:y34`` and a message id
``y34:turn`` in chat ``team2`` once spelled one Redis key (the message's dedup record was the
other chat's turn key, so that chat's message stayed unclaimed). Each id is now one key part
(sessions.keys.id_part): every chat gets its own turn, through the signed webhook."""

from __future__ import annotations

from tests.fakes.lark import FakeLark
from tests.support.helpers import InProcessGateway
from tests.support.lark import LarkHarness, answer, final_card, lark_config, message_event
from tests.support.waits import eventually


async def test_ids_with_separators_give_each_chat_its_own_turn(fake: FakeLark, prefix: str) -> None:
    config = lark_config(prefix, fake)
    config["runtime"]["dueShards"] = 1  # every conversation under one hash tag: keys can meet
    gw = InProcessGateway(config)
    await gw.start()
    lark = LarkHarness(fake, gw)
    try:
        sent = [
            ("team2", "y34:turn", "first"),  # its dedup key was chat team2:dedup:y34's turn key
            ("team2:dedup:y34", "om_second", "second"),
            ("team2", "turn", "third"),  # its dedup key was chat team2:dedup's turn key
            ("team2:dedup", "om_fourth", "fourth"),
        ]
        for chat_id, message_id, text in sent:
            status, _ = await lark.post(message_event(text, chat_id=chat_id, message_id=message_id))
            assert status == 200
            card = await eventually(final_card(fake, message_id), timeout=10)
            assert text in answer(card)
    finally:
        await lark.close()
