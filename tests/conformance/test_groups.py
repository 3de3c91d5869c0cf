"""Several senders, one chat, on every platform: a turn runs as exactly one sender. Two people
write within one burst window (``summaryWindowSeconds``) — in a group where the platform
declares groups, else each in their direct chat — and each message becomes a turn of its own,
run as its sender (the xpert expert's ``principals`` by ``senderId``: every request carries
their ``x-principal-user-id``, server/src/api-key/api-key-principal.ts:37-43, as the fake
XpertAI records it) on a thread of its own, answered where it was asked. (The console's case,
with the audit record and ``groupIdentity: shared``: tests/experts/test_xpert_identity.py.)"""

from __future__ import annotations

from typing import Any

from gateway.edge.capabilities import Capability
from tests.fakes.xpertai import API_KEY, FakeXpertAI
from tests.fakes.xpertai_input import Principal
from tests.support.conformance import Harness

USERS = {"alice": "u-a", "bob": "u-b"}


def expert(url: str, platform: Harness) -> dict[str, Any]:
    principals = [
        {"integrationId": platform.integration_id, "senderId": platform.user_id(u), "userId": uid}
        for u, uid in USERS.items()
    ]
    return {
        "id": "sales",
        "kind": "xpert",
        "baseUrl": url,
        "apiKey": API_KEY,
        "principalUserId": "u-42",
        "principals": principals,
        "connectRetries": 2,
    }


async def test_two_senders_within_one_window_run_as_two_turns_each_as_its_sender(
    platform: Harness, xpert: tuple[FakeXpertAI, str]
) -> None:
    fake, url = xpert
    for user, uid in USERS.items():
        fake.principals[uid] = Principal("en-US", f"{user}@example.com", "Europe/Berlin")
    group = platform.declares(Capability.GROUPS)
    await platform.start(experts=[expert(url, platform)], xpertId="sales", summaryWindowSeconds=1)
    asked = [await platform.send(f"{user} asks", user=user, group=group) for user in USERS]
    answers = [await platform.answer(sent, timeout=45) for sent in asked]

    runs = [
        (path.split("/threads/")[1].split("/")[0], named)
        for path, named in fake.principal_ids
        if path.endswith("/runs/stream")
    ]
    assert sorted(named or "" for _, named in runs) == ["u-a", "u-b"]  # two turns, one each
    assert runs[0][0] != runs[1][0]  # two XpertAI users, two threads
    inputs = [str(r["input"]["message"]["input"]["input"]) for r in fake.requests]
    by_user = {named: text for (_, named), text in zip(runs, inputs, strict=True)}
    for user, uid in USERS.items():  # each run carries its sender's message and no other's
        assert f"{user} asks" in by_user[uid]
        assert all(f"{other} asks" not in by_user[uid] for other in USERS if other != user)
    assert all(a.text for a in answers)
    assert platform.refused() == []
