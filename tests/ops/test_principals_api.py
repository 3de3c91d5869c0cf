"""``/v1.0/principals`` through HTTP: list, add and remove runtime sender -> XpertAI user entries,
and the next turn's requests carry what they say (console -> daemon -> fake XpertAI)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.fakes.xpertai import FakeXpertAI
from tests.support.admin import TOKEN, admin
from tests.support.helpers import ConsoleClient
from tests.support.xpert import config

CONFIGURED = [{"integrationId": "console", "senderId": "bob", "userId": "u-7"}]


async def _post(console: ConsoleClient, body: Any, token: str = TOKEN) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    async with console.http.post(
        console.base + "/v1.0/principals", json=body, headers=headers
    ) as r:
        return r.status, await r.json()


async def _turn_as(console: ConsoleClient, fake: FakeXpertAI, sender: str, done: int) -> str:
    """The x-principal-user-id of the run a message of ``sender`` starts."""
    await console.send(f"hi {done}", chat=f"dm-{sender}", sender=sender)
    await console.wait_cards(chat=f"dm-{sender}", count=done)
    runs = [n for p, n in fake.principal_ids if p.endswith("/runs/stream")]
    assert len(runs) == done
    return str(runs[-1])


async def test_a_runtime_entry_is_listed_applies_at_the_next_turn_and_goes_when_removed(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = xpert
    console = await make_gateway(config(prefix, url, {"principals": CONFIGURED}))
    assert await _turn_as(console, fake, "carol", 1) == "u-42"  # unmapped: principalUserId
    carol = {"expertId": "sales", "integrationId": "console", "senderId": "carol", "userId": "u-7"}
    status, body = await _post(console, carol)
    assert status == 200, body
    added = body["result"]
    assert added["source"] == "runtime" and added["senderId"] == "carol"
    entry_id = added["id"]
    status, listed = await admin(console, "GET", "/v1.0/principals")
    assert status == 200
    assert [(e["source"], e.get("senderId"), e["userId"]) for e in listed["result"]] == [
        ("config", "bob", "u-7"),
        ("runtime", "carol", "u-7"),
    ]
    assert listed["result"][1]["id"] == entry_id and listed["result"][1]["createdAt"] > 0
    assert await _turn_as(console, fake, "carol", 2) == "u-7"  # the next turn: no restart
    status, gone = await admin(console, "DELETE", f"/v1.0/principals/{entry_id}")
    assert (status, gone["result"]) == (200, {"id": entry_id, "deleted": True})
    assert await _turn_as(console, fake, "carol", 3) == "u-42"
    status, again = await admin(console, "DELETE", f"/v1.0/principals/{entry_id}")
    assert status == 404 and again["code"] == "not_found"


@pytest.mark.parametrize(
    ("body", "status", "msg"),
    [
        ([], 400, "the body must be a JSON object"),
        ({"senderId": "x", "userId": "u"}, 400, "expertId: name an expert of kind xpert (sales)"),
        ({"expertId": "sales", "userId": "u-1"}, 400, "at least one of integrationId"),
        ({"expertId": "sales", "senderId": "x"}, 400, "userId: Field required"),
        ({"expertId": "sales", "senderId": "x", "userId": "u", "role": "x"}, 400, "role: Extra"),
        ({"expertId": "sales", "id": "a b", "senderId": "x", "userId": "u"}, 400, "id: must"),
        ({"expertId": "sales", "senderId": "x", "userId": "u"}, 400, "senderId needs integ"),
    ],
)
async def test_a_bad_entry_is_refused_with_the_reason(
    xpert: tuple[FakeXpertAI, str],
    make_gateway: Callable[..., Any],
    prefix: str,
    body: Any,
    status: int,
    msg: str,
) -> None:
    _fake, url = xpert
    console = await make_gateway(config(prefix, url))
    got, answer = await _post(console, body)
    assert (got, answer["success"]) == (status, False) and msg in answer["msg"], answer
    _, listed = await admin(console, "GET", "/v1.0/principals")
    assert listed["result"] == []


async def test_an_id_in_use_is_refused_and_a_wrong_token_stores_nothing(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    _fake, url = xpert
    console = await make_gateway(config(prefix, url))
    entry = {"expertId": "sales", "id": "carol", "email": "carol@example.com", "userId": "u-7"}
    status, _ = await _post(console, entry, token="wrong")
    assert status == 401
    assert (await _post(console, entry))[0] == 200
    status, answer = await _post(console, {**entry, "userId": "u-42"})
    assert status == 409 and answer["msg"] == "id: carol is in use"
    _, listed = await admin(console, "GET", "/v1.0/principals", expertId="sales")
    assert [(e["id"], e["email"], e["userId"]) for e in listed["result"]] == [
        ("carol", "carol@example.com", "u-7")
    ]
