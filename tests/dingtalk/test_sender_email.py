"""The DingTalk sender's email (``topapi/v2/user/get``, tests/fakes/dingtalk.py): looked up by
staff id, cached, and matched against the xpert expert's ``principals``, so a mapped sender's
run carries their ``x-principal-user-id``; an app without the contact permission logs it once
and its turns run without an email."""

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


def principal_of(xpert: FakeXpertAI) -> list[str | None]:
    return [named for path, named in xpert.principal_ids if path.endswith("/threads")]


async def test_a_mapped_dingtalk_sender_runs_as_their_xpertai_user_by_email(
    prefix: str, xpert: tuple[FakeXpertAI, str]
) -> None:
    agent, url = xpert
    async with running(prefix, experts=[expert(url)], xpertId="sales") as (fake, h):
        fake.users["carol"] = {"name": "Carol", "email": "", "org_email": "carol@example.com"}
        fake.users["dave"] = {"name": "Dave", "email": "dave@example.com"}
        status, _ = await h.post(robot_message(fake, "hi", sender="carol"))
        assert status == 200
        await eventually(lambda: len(principal_of(agent)) == 1, timeout=20)
        await h.post(robot_message(fake, "hi", sender="dave"))
        await eventually(lambda: len(principal_of(agent)) == 2, timeout=20)
        # carol by her org email (any case), dave by nothing: principalUserId.
        assert principal_of(agent) == ["u-9", "u-42"]
        assert [b["userid"] for b in lookups(fake)] == ["carol", "dave"]
        # carol again: read from Redis, not asked again. (dave's turn ends first: its last
        # requests, the thread state read after the run, come after its thread's.)
        await h.idle()
        runs = len(agent.principal_ids)
        await h.post(robot_message(fake, "again", sender="carol"))
        await eventually(lambda: len(agent.principal_ids) > runs, timeout=20)
        await h.idle()
        assert len(lookups(fake)) == 2
        assert {named for _, named in agent.principal_ids[runs:]} == {"u-9"}


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
