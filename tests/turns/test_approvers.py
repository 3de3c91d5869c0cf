"""Who may answer a Confirm / Reject (issue 25): the sender of the interrupted turn, and the
``approvers`` of the integration or of the chat's route. Anyone else's click is refused with a
notice saying who may answer (a toast on Lark, ``notice`` in the console's answer), the question
stays pending, and the resumed turn runs as its sender; the audit record names the approver.
Driven from outside: the console's HTTP API and the admin API's audit (Lark's signed callbacks:
tests/lark/test_approvers.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.support.admin import TOKEN, admin
from tests.support.configs import base_config
from tests.support.helpers import ConsoleClient, InProcessGateway, clocked_scheduler
from tests.support.waits import eventually


def config(prefix: str, **integration: Any) -> dict[str, Any]:
    cfg = base_config(prefix, **integration)
    cfg["admin"] = {"token": TOKEN}
    return cfg


async def asked_in_team(console: ConsoleClient) -> dict[str, Any]:
    """alice's question in the group "team", waiting for Confirm / Reject: its card."""
    await console.send("[confirm] drop the table", chat="team", mention=True)
    [card] = await console.wait_cards("team", status="waiting")
    return card


async def click(console: ConsoleClient, card: dict[str, Any], action: str, sender: str) -> Any:
    status, body = await console.post(
        "/console/api/actions",
        {
            "integrationId": "console",
            "chatId": "team",
            "messageId": card["id"],
            "actionId": action,
            "senderId": sender,
        },
    )
    assert status == 202, body
    return body


async def audit(console: ConsoleClient, count: int) -> list[dict[str, Any]]:
    async def enough() -> list[dict[str, Any]] | None:
        status, body = await admin(console, "GET", "/v1.0/audit")
        assert status == 200, body
        result: list[dict[str, Any]] = body["result"]
        return result if len(result) >= count else None

    found: list[dict[str, Any]] = await eventually(enough, timeout=15)
    return found


async def test_a_confirm_clicked_by_another_member_is_refused_and_the_asker_can_still_answer(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway(config(prefix))
    card = await asked_in_team(console)
    for action in ("confirm", "reject"):
        body = await click(console, card, action, "bob")
        assert body["status"] == "refused", body
        assert "who asked" in body["notice"] and "alice" in body["notice"].lower()
    [still] = await console.cards("team")
    assert still["card"]["status"] == "waiting"  # nothing resumed
    body = await click(console, card, "confirm", "alice")
    assert body["status"] == "queued" and "notice" not in body
    [done] = await console.wait_cards("team", status="done")
    assert done["card"]["answer"].startswith("Confirmed.")
    resumed, asked = await audit(console, 2)
    assert asked["outcome"] == "interrupted" and resumed["outcome"] == "done"
    assert (resumed["senderId"], resumed["approver"]) == ("alice", "alice")
    assert asked["approver"] is None
    assert len(await audit(console, 2)) == 2  # bob's clicks ran no turn


async def test_an_approver_may_answer_for_the_asker_and_the_audit_names_them(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway(config(prefix, approvers=["u2"]))
    card = await asked_in_team(console)
    assert (await click(console, card, "confirm", "mallory"))["status"] == "refused"
    body = await click(console, card, "confirm", "u2")
    assert body["status"] == "queued" and "notice" not in body
    await console.wait_cards("team", status="done")
    resumed, _ = await audit(console, 2)
    # The resumed turn is still alice's; u2 approved it.
    assert (resumed["senderId"], resumed["approver"]) == ("alice", "u2")


async def test_a_route_sets_its_own_approvers(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    route = {"chatId": "team", "approvers": ["carol"]}
    console = await make_gateway(config(prefix, approvers=["u2"], routes=[route]))
    card = await asked_in_team(console)
    body = await click(console, card, "reject", "u2")  # the integration's, not this chat's
    assert body["status"] == "refused" and "approver" in body["notice"]
    assert (await click(console, card, "reject", "carol"))["status"] == "queued"
    [done] = await console.wait_cards("team", status="rejected")
    assert done["card"]["answer"].startswith("Rejected")
    resumed, _ = await audit(console, 2)
    assert (resumed["senderId"], resumed["approver"]) == ("alice", "carol")


async def test_a_chat_schedule_asks_the_member_who_made_it_and_a_config_one_its_approvers(
    gateways: Callable[..., Any], prefix: str
) -> None:
    # No person sent a scheduled turn's message: the member who made the schedule in the chat
    # answers its questions; a config schedule's only an approver (nobody would, by default).
    nightly = {
        "id": "nightly",
        "integrationId": "console",
        "chatId": "team",
        "chatType": "group",
        "cron": "0 3 * * *",
        "text": "[confirm] rotate the keys",
    }
    cfg = config(prefix, approvers=["u2"])
    cfg["schedules"] = [nightly]
    gw: InProcessGateway = await gateways(cfg)
    gw.gateway.scheduler.stop()  # the test's scheduler fires, on the test's clock
    c, book = gw.client, gw.gateway.intake.schedules.book
    await c.send("/schedule 0 4 * * * [confirm] drop the cache", chat="team", mention=True)
    await eventually(lambda: _texts_with(c, "team", "Scheduled: 0 4 * * *"))
    [made] = [e for e in await book.entries("console", "team") if e.source == "runtime"]
    assert made.cron is not None and made.schedule.created_by == "alice"
    at = made.cron.next_after(made.schedule.created_at)  # its next 04:00
    clock = [at - 1_000]
    scheduler = clocked_scheduler(gw, cfg, clock)
    await scheduler.tick()  # first sight: fires from now on
    clock[0] = at + 50
    await scheduler.tick()
    [card] = await c.wait_cards("team", status="waiting")
    body = await click(c, card, "confirm", "bob")
    assert body["status"] == "refused" and "alice, who made this schedule" in body["notice"]
    assert (await click(c, card, "confirm", "alice"))["status"] == "queued"
    await c.wait_cards("team", status="done")
    # The config's schedule: no member made it, so only an approver answers.
    clock[0] = at + 23 * 3_600_000 + 50  # nightly's 03:00, before the next 04:00
    await scheduler.tick()
    [waiting] = await eventually(lambda: _with_status(c, "waiting"))
    body = await click(c, waiting, "confirm", "alice")
    assert body["status"] == "refused" and "approver" in body["notice"], body
    assert (await click(c, waiting, "confirm", "u2"))["status"] == "queued"
    await eventually(lambda: _with_status(c, "done", 2), timeout=15)


async def _texts_with(client: ConsoleClient, chat: str, fragment: str) -> list[str]:
    return [t for t in await client.texts(chat) if fragment in t]


async def _with_status(
    client: ConsoleClient, status: str, count: int = 1
) -> list[dict[str, Any]] | None:
    found = [x for x in await client.cards("team") if x["card"]["status"] == status]
    return found if len(found) == count else None


async def test_a_retry_follows_the_confirm_rule_and_the_audit_names_sender_and_clicker(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    """Issue 36: Retry runs the failed turn again as its sender, so only the sender or an
    approver may press it; the audit record names both the sender and the clicker."""
    from tests.fakes.experts import OPENAI_KEY, FakeOpenAI
    from tests.support.helpers import serve

    fake = FakeOpenAI(fail_with=[500])
    async for url in serve(fake.app()):
        cfg = config(prefix, xpertId="gpt", approvers=["u2"])
        expert = {"id": "gpt", "kind": "openai", "baseUrl": url + "/v1", "apiKey": OPENAI_KEY}
        cfg["experts"] = [{**expert, "model": "m", "retries": 0}]
        console = await make_gateway(cfg)
        await console.send("hello", chat="team", mention=True)
        [card] = await console.wait_cards("team", status="error")
        body = await click(console, card, "retry", "bob")
        assert body["status"] == "refused", body
        assert "who asked" in body["notice"] and "alice" in body["notice"].lower()
        assert len(fake.requests) == 1  # bob's click ran nothing
        assert (await click(console, card, "retry", "u2"))["status"] == "queued"
        [done] = await console.wait_cards("team", status="done")
        assert done["card"]["answer"] == "Echo: hello"
        retried, failed = await audit(console, 2)
        assert (failed["senderId"], failed["approver"]) == ("alice", None)
        assert (retried["senderId"], retried["approver"]) == ("alice", "u2")
        assert retried["trigger"]["action"] == "retry"
