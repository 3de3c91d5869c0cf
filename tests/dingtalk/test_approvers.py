"""DingTalk markdown mode in a group (issue 25, item 7): a button link acts as the person its
token names, so Confirm / Reject links never go into the group, where every member could open
them as the asker. Each person who may answer (the asker, the chat's ``approvers``) gets links
signed for them in a 1:1 robot message (``oToMessages/batchSend``); the group is told who was
asked, or plainly that it could not be delivered (a direct chat's links, and who may click in a
group: tests/conformance/test_approvers.py). Driven from outside: signed robot webhooks, the
fake DingTalk, the link pages and the admin API's audit."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from structlog.testing import capture_logs

from adapters.dingtalk.crypto import verify_action
from tests.fakes.dingtalk import FakeDingTalk
from tests.support.admin import TOKEN
from tests.support.dingtalk import SECRET, DingTalkHarness, dingtalk_config, robot_message
from tests.support.helpers import InProcessGateway, free_port
from tests.support.waits import eventually

Harness = tuple[FakeDingTalk, DingTalkHarness]
BATCH = "/v1.0/robot/oToMessages/batchSend"
PROMPT = "Please confirm: shall I go ahead?"


@contextlib.asynccontextmanager
async def running(prefix: str, **options: Any) -> AsyncIterator[Harness]:
    """A fake DingTalk and a gateway (HTTP mode, markdown replies, admin API on)."""
    fake = FakeDingTalk()
    await fake.start()
    port = free_port()
    config = dingtalk_config(prefix, fake, port, **options)
    config["admin"] = {"token": TOKEN}
    gateway = InProcessGateway(config)
    gateway.port = port
    await gateway.start()
    harness = DingTalkHarness(fake, gateway)
    try:
        yield fake, harness
    finally:
        await harness.close()
        await gateway.stop()
        await fake.stop()


def claims(url: str) -> dict[str, Any]:
    return verify_action(SECRET, url.partition("?t=")[2], now_s=time.time())


def group_sent(fake: FakeDingTalk) -> list[dict[str, Any]]:
    """What reached the group chat (its sessionWebhook)."""
    return [m for m in fake.sent() if m["via"] == "webhook"]


def privately(fake: FakeDingTalk) -> dict[str, dict[str, Any]]:
    """The 1:1 robot messages that reached someone, by staff id: title, text, url per action."""
    out: dict[str, dict[str, Any]] = {}
    for call in fake.calls:
        if call.path != BATCH or call.status >= 300 or not call.delivered:
            continue
        param = json.loads(call.body["msgParam"])
        urls = [v for k, v in param.items() if k.lower().startswith(("singleurl", "actionurl"))]
        for user in call.body["userIds"]:
            out[user] = {**param, "urls": {claims(u)["a"]: u for u in urls}}
    return out


async def asked_in_group(fake: FakeDingTalk, h: DingTalkHarness) -> dict[str, Any]:
    """Alice asks for something that needs a Confirm in the group; the group's question."""
    status, _ = await h.post(robot_message(fake, "[confirm] drop it", group=True, sender="alice"))
    assert status == 200
    waiting: dict[str, Any] = await eventually(
        lambda: next((m for m in group_sent(fake) if m["title"] == PROMPT), None), timeout=30
    )
    return waiting


async def audit(h: DingTalkHarness, count: int) -> list[dict[str, Any]]:
    async def enough() -> list[dict[str, Any]] | None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with h.http.get(f"{h.base}/v1.0/audit", headers=headers) as resp:
            assert resp.status == 200
            result: list[dict[str, Any]] = (await resp.json())["result"]
        return result if len(result) >= count else None

    found: list[dict[str, Any]] = await eventually(enough, timeout=15)
    return found


def no_answer_links(fake: FakeDingTalk) -> None:
    """No link in the group answers a Confirm / Reject."""
    for message in group_sent(fake):
        for url in message["urls"]:
            assert claims(url)["a"] not in ("confirm", "reject"), message


async def test_a_group_question_goes_to_the_asker_privately(prefix: str, redis_client: Any) -> None:
    async with running(prefix) as (fake, h):
        waiting = await asked_in_group(fake, h)
        assert waiting["urls"] == []
        assert "Waiting for Alice to Confirm or Reject (sent to them privately)" in waiting["text"]
        no_answer_links(fake)
        sent = await eventually(lambda: privately(fake).get("alice"))
        assert list(privately(fake)) == ["alice"]
        assert PROMPT in sent["text"] and "“Team”" in sent["text"]
        assert set(sent["urls"]) == {"confirm", "reject"}
        for url in sent["urls"].values():  # signed for her, for the group's turn
            signed = claims(url)
            assert (signed["u"], signed["ch"], signed["g"]) == ("alice", "cidGROUP", 1)
        status, page = await h.click(sent["urls"]["confirm"])
        assert status == 200 and "Confirmed" in page
        final = await eventually(
            lambda: next((m for m in group_sent(fake) if m["text"].startswith("Confirmed.")), None),
            timeout=30,
        )
        assert "drop it" in final["text"]
        resumed, asked = await audit(h, 2)
        assert (resumed["senderId"], resumed["approver"]) == ("alice", "alice")
        assert asked["outcome"] == "interrupted"
        no_answer_links(fake)


async def test_an_approver_gets_their_own_links_and_the_audit_names_them(
    prefix: str, redis_client: Any
) -> None:
    async with running(prefix, approvers=["u2"]) as (fake, h):
        waiting = await asked_in_group(fake, h)
        assert "Waiting for Alice or u2 to Confirm or Reject" in waiting["text"]
        no_answer_links(fake)
        sent = await eventually(lambda: len(privately(fake)) == 2 and privately(fake))
        assert {claims(u)["u"] for u in sent["u2"]["urls"].values()} == {"u2"}
        assert {claims(u)["u"] for u in sent["alice"]["urls"].values()} == {"alice"}
        status, page = await h.click(sent["u2"]["urls"]["confirm"])
        assert status == 200 and "Confirmed" in page
        resumed, _ = await audit(h, 2)
        assert resumed["outcome"] == "done"
        assert (resumed["senderId"], resumed["approver"]) == ("alice", "u2")
        # Alice's own links now find nothing pending: no second run.
        status, page = await h.click(sent["alice"]["urls"]["reject"])
        assert status == 200
        notice = await eventually(
            lambda: next((m for m in fake.sent() if "Nothing is waiting" in m["text"]), None)
        )
        assert notice is not None
        assert [m for m in fake.sent() if m["text"].startswith("Confirmed.")]
        assert not [m for m in fake.sent() if m["title"] == "Rejected"]


async def test_a_refused_direct_message_is_said_in_the_group(
    prefix: str, redis_client: Any
) -> None:
    async with running(prefix, approvers=["u2"]) as (fake, h):
        # DingTalk's answer for a staff id it does not know (developer.aliyun.com/ask/588455)
        code = "staffId.notExisted"
        fake.fail(BATCH, status=400, code=code, times=1)  # alice's
        fake.invalid_staff.add("u2")  # not a member of the organisation
        with capture_logs() as logs:
            waiting = await asked_in_group(fake, h)
        assert waiting["urls"] == []
        text = waiting["text"]
        assert "Confirm or Reject could not be sent privately to Alice, u2" in text
        assert "open a direct chat with this bot" in text
        no_answer_links(fake)
        assert privately(fake) == {}
        refused = [e for e in logs if e["event"] == "direct message refused"]
        assert [e["code"] for e in refused] == [code, "invalidStaffIdList"]
        assert [e["user"] for e in refused] == ["alice", "u2"]
        assert all(e["log_level"] == "warning" for e in refused)
        noisy = [e for e in logs if e.get("exc_info") or e["log_level"] in ("error", "critical")]
        assert noisy == []


async def test_a_routines_confirm_goes_privately_too(prefix: str, redis_client: Any) -> None:
    """A routine's Confirm / Cancel is the asker's or a schedule admin's: the same rule."""
    async with running(prefix, scheduleAdmins=["alice", "carol"]) as (fake, h):
        ask = robot_message(fake, "每天 9 点总结本群", group=True, sender="alice")
        assert (await h.post(ask))[0] == 200
        asked = await eventually(
            lambda: next(
                (m for m in group_sent(fake) if m["title"] == "Schedule this routine?"), None
            ),
            timeout=30,
        )
        assert asked["urls"] == []
        assert "Waiting for Alice or carol to Confirm or Cancel" in asked["text"]
        sent = await eventually(lambda: len(privately(fake)) == 2 and privately(fake))
        assert set(sent["carol"]["urls"]) == {"routine_confirm", "routine_cancel"}
        assert {claims(u)["u"] for u in sent["carol"]["urls"].values()} == {"carol"}
        status, page = await h.click(sent["carol"]["urls"]["routine_confirm"])
        assert status == 200 and "Scheduled" in page
        await eventually(lambda: any(m["title"] == "Scheduled" for m in group_sent(fake)))
        no_answer_links(fake)


async def test_in_stream_mode_markdown_the_group_gets_no_answer_link(
    prefix: str, redis_client: Any
) -> None:
    """Stream mode without a card template replies in markdown too: the same links, the same
    rule."""
    async with running(prefix, connectionMode="stream") as (fake, h):
        await eventually(lambda: fake.stream.connects == 1)
        message = robot_message(fake, "[confirm] drop it", group=True, sender="alice")
        await fake.push("CALLBACK", "/v1.0/im/bot/messages/get", message)
        waiting = await eventually(
            lambda: next((m for m in group_sent(fake) if m["title"] == PROMPT), None), timeout=30
        )
        assert waiting["urls"] == [] and "sent to them privately" in waiting["text"]
        sent = await eventually(lambda: privately(fake).get("alice"))
        status, page = await h.click(sent["urls"]["reject"])
        assert status == 200 and "Rejected" in page
        await eventually(lambda: any(m["title"] == "Rejected" for m in group_sent(fake)))
        no_answer_links(fake)
