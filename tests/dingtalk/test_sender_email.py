"""The DingTalk sender's email (``topapi/v2/user/get``, tests/fakes/dingtalk.py): an app without
the contact permission logs it once and its turns run without an email. (Looked up, cached and
matched against ``principals``: tests/conformance/test_sender_email.py.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from tests.fakes.dingtalk import USER_GET_PATH, FakeDingTalk
from tests.fakes.xpertai import API_KEY, FakeXpertAI
from tests.fakes.xpertai_input import Principal
from tests.support.dingtalk import robot_message, running
from tests.support.helpers import serve
from tests.support.waits import eventually


@pytest.fixture
async def xpert() -> AsyncIterator[tuple[FakeXpertAI, str]]:
    fake = FakeXpertAI(keepalive_s=0.2)
    fake.principals["u-9"] = Principal("en-US", "carol@example.com", "UTC")
    async for url in serve(fake.app()):
        yield fake, url + "/api/ai"


def expert(url: str) -> dict[str, Any]:
    return {
        "id": "sales",
        "kind": "xpert",
        "baseUrl": url,
        "apiKey": API_KEY,
        "organizationId": "org-1",
        "principalUserId": "u-42",
        "connectRetries": 2,
        "principals": [{"email": "Carol@Example.com", "userId": "u-9"}],
    }


def lookups(fake: FakeDingTalk) -> list[dict[str, Any]]:
    return [c.body for c in fake.calls if c.path == USER_GET_PATH]


async def test_without_the_contact_permission_the_turn_runs_and_the_log_says_so_once(
    prefix: str, xpert: tuple[FakeXpertAI, str]
) -> None:
    agent, url = xpert
    async with running(prefix, experts=[expert(url)], xpertId="sales") as (fake, h):
        fake.contact_permission = False
        fake.users["carol"] = {"email": "carol@example.com"}
        with capture_logs() as logs:
            for i, sender in enumerate(("carol", "erin", "carol")):
                await h.post(robot_message(fake, f"hi {i}", sender=sender))
                runs = len(agent.principal_ids)
                await eventually(lambda n=runs: len(agent.principal_ids) > n, timeout=20)
                await h.idle()
        told = [e for e in logs if "contact permission" in str(e["event"])]
        assert len(told) == 1 and told[0]["log_level"] == "warning"
        assert len(lookups(fake)) == 1  # the refusal holds for every sender, for an hour
        assert {named for _, named in agent.principal_ids} == {"u-42"}
