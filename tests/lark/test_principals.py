"""A Lark sender as their own XpertAI user (issue 28 item 5): the sender's email, looked up
with the contact API (fake Lark ``/contact/v3/users``), matches the ``xpert`` expert's
``principals`` entry, so every request of that run carries the entry's ``x-principal-user-id``
(server/src/api-key/api-key-principal.ts:37-43, as the fake XpertAI checks it); a sender no
entry matches runs as ``principalUserId``."""

from __future__ import annotations

from tests.fakes.lark import FakeLark
from tests.fakes.xpertai import FakeXpertAI
from tests.fakes.xpertai_input import Principal
from tests.support.helpers import InProcessGateway, serve
from tests.support.lark import LarkHarness, final_card, lark_config, message_event
from tests.support.waits import eventually
from tests.support.xpert import xpert_expert

PRINCIPALS = [{"email": "Carol@Example.com", "userId": "u-9"}]


async def test_a_lark_sender_mapped_by_email_runs_as_their_xpertai_user(
    fake: FakeLark, prefix: str
) -> None:
    xpert = FakeXpertAI(keepalive_s=0.2)
    xpert.principals["u-9"] = Principal("fr-FR", "carol@example.com", "Europe/Paris")
    fake.users["ou_carol"] = {"open_id": "ou_carol", "email": "carol@example.com"}
    async for url in serve(xpert.app()):
        config = lark_config(prefix, fake, xpertId="sales")
        config["experts"] = [{**xpert_expert(url + "/api/ai"), "principals": PRINCIPALS}]
        gw = InProcessGateway(config)
        await gw.start()
        lark = LarkHarness(fake, gw)
        try:
            await lark.post(
                message_event("hi", message_id="om_p1", sender="ou_carol", chat_id="oc_c")
            )
            await eventually(final_card(fake, "om_p1"))
            await lark.post(
                message_event("hi", message_id="om_p2", sender="ou_dan", chat_id="oc_d")
            )
            await eventually(final_card(fake, "om_p2"))
        finally:
            await lark.close()
    by_thread: dict[str, set[str | None]] = {}
    for thread in xpert.threads.values():
        ids = {named for path, named in xpert.principal_ids if f"/threads/{thread.id}/" in path}
        by_thread[thread.values["sys"]["user_email"]] = ids
    assert by_thread == {"carol@example.com": {"u-9"}, "alice@example.com": {"u-42"}}
