"""WeCom app mode looks up the sender's email (``user/get``, tests/fakes/wecom.py 9.): a sender
mapped by email in the xpert expert's ``principals`` runs as their XpertAI user; a refused
look-up is logged once and the turn runs without an email."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from structlog.testing import capture_logs

from tests.fakes.wecom import FakeWeCom
from tests.fakes.xpertai import API_KEY, FakeXpertAI
from tests.fakes.xpertai_input import Principal
from tests.support.helpers import serve
from tests.support.waits import eventually
from tests.support.wecom import app_message, encrypt_xml, post, start_gateway, url


@pytest.fixture
async def xpert() -> AsyncIterator[tuple[FakeXpertAI, str]]:
    fake = FakeXpertAI(keepalive_s=0.2)
    fake.principals["u-9"] = Principal("fr-FR", "carol@corp.example", "Europe/Paris")
    async for base in serve(fake.app()):
        yield fake, base + "/api/ai"


def _expert(base: str) -> dict[str, Any]:
    return {
        "id": "sales",
        "kind": "xpert",
        "baseUrl": base,
        "apiKey": API_KEY,
        "principalUserId": "u-42",
        "principals": [{"email": "Carol@Corp.Example", "userId": "u-9"}],
        "connectRetries": 2,
    }


def _runs_of(fake: FakeXpertAI) -> list[str | None]:
    return [who for path, who in fake.principal_ids if path.endswith("/runs/stream")]


async def test_a_sender_mapped_by_email_runs_as_their_user_and_a_refusal_logs_once(
    gateways: list[Any], prefix: str, fake: FakeWeCom, xpert: tuple[FakeXpertAI, str]
) -> None:
    model, base = xpert
    fake.users["carol"] = {"name": "Carol", "email": "", "biz_mail": "carol@corp.example"}
    fake.hidden.add("dan")  # outside the app's visible range: 60011
    gw = await start_gateway(prefix, fake, expert=_expert(base), xpertId="sales")
    gateways.append(gw)
    async with aiohttp.ClientSession() as http:
        with capture_logs() as logs:
            for n, (user, text) in enumerate(
                [("carol", "one"), ("carol", "two"), ("dan", "three"), ("dan", "four")]
            ):
                query, body = encrypt_xml(app_message(user, text, f"80{n}"))
                assert await post(http, url(gw), query, body) == (200, "")
                await eventually(lambda n=n: len(_runs_of(model)) == n + 1, timeout=15)
                await gw.idle()
    # carol by her (business) email, any case: u-9 on both turns; dan without one: the default.
    assert _runs_of(model) == ["u-9", "u-9", "u-42", "u-42"]
    lookups = [c[1]["userid"] for c in fake.calls if c[0] == "user/get"]
    assert lookups == ["carol", "dan"]  # each asked once, the refusal remembered too
    refused = [
        e for e in logs if e["event"] == "sender email look-up refused; turns run without it"
    ]
    assert len(refused) == 1 and refused[0]["code"] == 60011
    assert refused[0]["log_level"] == "warning" and "dan" not in str(refused[0])
    assert [t for t in fake.texts() if "three" in t or "four" in t]  # dan's turns ran


async def test_without_lookup_sender_email_nobody_is_asked(
    gateways: list[Any], prefix: str, fake: FakeWeCom, xpert: tuple[FakeXpertAI, str]
) -> None:
    model, base = xpert
    fake.users["carol"] = {"name": "Carol", "email": "carol@corp.example"}
    gw = await start_gateway(
        prefix, fake, expert=_expert(base), xpertId="sales", lookupSenderEmail=False
    )
    gateways.append(gw)
    async with aiohttp.ClientSession() as http:
        query, body = encrypt_xml(app_message("carol", "hi", "8101"))
        assert await post(http, url(gw), query, body) == (200, "")
        await eventually(lambda: len(_runs_of(model)) == 1, timeout=15)
    assert _runs_of(model) == ["u-42"]
    assert not [c for c in fake.calls if c[0] == "user/get"]
