"""The sender's email on every platform (``sys.user_email``, issue 28 item 5): where the platform
declares a directory, the gateway looks the sender up (once: cached), and a sender mapped by
email in the xpert expert's ``principals`` (any case; the platform's work address too) runs as
their XpertAI user, every request of the run carrying ``x-principal-user-id``
(server/src/api-key/api-key-principal.ts:37-43, as the fake XpertAI checks it); a sender no
entry matches runs as ``principalUserId``. Where it declares none, or ``lookupSenderEmail`` is
off, nobody is asked and every sender runs as ``principalUserId``. (Refusals are each
platform's own: tests/dingtalk/test_sender_email.py, tests/wecom/test_sender_email.py.)"""

from __future__ import annotations

from typing import Any

from gateway.edge.capabilities import Capability
from tests.fakes.xpertai import API_KEY, FakeXpertAI
from tests.fakes.xpertai_input import Principal
from tests.support.conformance import Harness


def expert(url: str) -> dict[str, Any]:
    return {
        "id": "sales",
        "kind": "xpert",
        "baseUrl": url,
        "apiKey": API_KEY,
        "principalUserId": "u-42",
        "principals": [{"email": "Carol@Example.com", "userId": "u-9"}],
        "connectRetries": 2,
    }


def runs_as(fake: FakeXpertAI) -> list[str | None]:
    return [named for path, named in fake.principal_ids if path.endswith("/runs/stream")]


async def test_a_sender_mapped_by_email_runs_as_their_xpertai_user(
    platform: Harness, xpert: tuple[FakeXpertAI, str]
) -> None:
    fake, url = xpert
    fake.principals["u-9"] = Principal("fr-FR", "carol@example.com", "Europe/Paris")
    await platform.start(experts=[expert(url)], xpertId="sales")
    if platform.can(Capability.SENDER_EMAIL):
        platform.member("carol", "carol@example.com", work_address=True)
        platform.member("dave", "dave@example.com")
    for user, text in [("carol", "one"), ("dave", "two"), ("carol", "three")]:
        await platform.answer(await platform.send(text, user=user))
    if platform.can(Capability.SENDER_EMAIL):
        assert runs_as(fake) == ["u-9", "u-42", "u-9"]
        # each asked once: carol's second turn reads her email from Redis
        assert platform.lookups() == [platform.user_id("carol"), platform.user_id("dave")]
    else:
        assert runs_as(fake) == ["u-42"] * 3 and platform.lookups() == []


async def test_without_lookup_sender_email_nobody_is_asked(
    platform: Harness, xpert: tuple[FakeXpertAI, str]
) -> None:
    fake, url = xpert
    # the key only where the platform has a directory (it is unknown to the others' settings)
    off = {"lookupSenderEmail": False} if platform.declares(Capability.SENDER_EMAIL) else {}
    await platform.start(experts=[expert(url)], xpertId="sales", **off)
    if platform.can(Capability.SENDER_EMAIL):
        platform.member("carol", "carol@example.com")
    await platform.answer(await platform.send("hi", user="carol"))
    assert runs_as(fake) == ["u-42"] and platform.lookups() == []
