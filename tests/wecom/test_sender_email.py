"""WeCom app mode looks up the sender's email (``user/get``, tests/fakes/wecom.py 9.): a refused
look-up is logged once and the turn runs without an email. (A sender mapped by email in
``principals``: tests/conformance/test_sender_email.py.)"""

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


async def test_a_refused_look_up_is_logged_once_and_the_turns_run_without_an_email(
    gateways: list[Any], prefix: str, fake: FakeWeCom, xpert: tuple[FakeXpertAI, str]
) -> None:
    model, base = xpert
    fake.hidden.add("dan")  # outside the app's visible range: 60011
    gw = await start_gateway(prefix, fake, expert=_expert(base), xpertId="sales")
    gateways.append(gw)
    async with aiohttp.ClientSession() as http:
        with capture_logs() as logs:
            for n, (user, text) in enumerate([("dan", "three"), ("dan", "four")]):
                query, body = encrypt_xml(app_message(user, text, f"80{n}"))
                assert await post(http, url(gw), query, body) == (200, "")
                await eventually(lambda n=n: len(_runs_of(model)) == n + 1, timeout=15)
                await gw.idle()
    assert _runs_of(model) == ["u-42", "u-42"]  # without an email: the default
    lookups = [c[1]["userid"] for c in fake.calls if c[0] == "user/get"]
    assert lookups == ["dan"]  # asked once, the refusal remembered
    refused = [
        e for e in logs if e["event"] == "sender email look-up refused; turns run without it"
    ]
    assert len(refused) == 1 and refused[0]["code"] == 60011
    assert refused[0]["log_level"] == "warning" and "dan" not in str(refused[0])
    assert [t for t in fake.texts() if "three" in t or "four" in t]  # dan's turns ran
