"""Schedules made in a chat cannot flood it (issue 25): ``/schedule`` and routines said in plain
words are refused when their cron fires more often than ``scheduleMinIntervalSeconds`` (default
5 minutes; the admin API is not held to it), and a schedule's fires count against the chat's
budget (``limits``): a fire over it is skipped with a notice, not run. Real daemon and Redis, the
console as the chat; the scheduler's clock is the test's (no waiting for real fire times)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from structlog.testing import capture_logs

from gateway.config.cron import Cron, min_gap_seconds
from gateway.triggers.schedules import Scheduler
from tests.support.admin import TOKEN, admin
from tests.support.configs import base_config
from tests.support.helpers import ConsoleClient, InProcessGateway, clocked_scheduler
from tests.support.waits import eventually


def config(prefix: str, *schedules: dict[str, Any], **integration: Any) -> dict[str, Any]:
    cfg = base_config(prefix, **integration)
    cfg["admin"] = {"token": TOKEN}
    cfg["schedules"] = list(schedules)
    return cfg


async def texts_with(client: ConsoleClient, chat: str, fragment: str) -> list[str]:
    return [t for t in await client.texts(chat) if fragment in t]


@pytest.mark.parametrize(
    ("cron", "gap"),
    [
        ("*/1 * * * * *", 1),
        ("* * * * * *", 1),
        ("0,1 * * * *", 60),  # the smallest gap, not the average
        ("*/5 * * * *", 300),
        ("*/7 * * * *", 240),  # :56 to :00
        ("0 0,59 0,23 * * *", 60),  # 23:59 to 00:00 the next day
        ("0 0,23 * * *", 3600),  # 23:00 to 00:00 the next day
        ("0 0,23 * * 1", 23 * 3600),  # no two days in a row
        ("0 9 * * 1-5", 86_400),
        ("0 0 29 2 *", 2 * 86_400),  # at most daily, never on two days in a row
    ],
)
def test_the_smallest_gap_between_fires(cron: str, gap: int) -> None:
    assert min_gap_seconds(Cron.parse(cron)) == gap


async def test_a_schedule_every_second_made_in_a_chat_is_refused_naming_the_minimum(
    gateways: Callable[..., Any], prefix: str
) -> None:
    gw = await gateways(config(prefix))
    c, store = gw.client, gw.gateway.intake.schedules.book.store
    await c.send("/schedule */1 * * * * * x")
    [refused] = await eventually(lambda: texts_with(c, "dm-alice", "Not scheduled"))
    assert refused == (
        "Not scheduled: schedules made in a chat may fire at most once every 5 minutes, "
        "and `*/1 * * * * *` fires 1 second apart."
    )
    await c.send("/schedule 0,1 * * * * x", chat="team", mention=True)
    [refused] = await eventually(lambda: texts_with(c, "team", "Not scheduled"))
    assert "fires 1 minute apart" in refused
    await c.send("every minute check the queue")  # a routine: refused before its card
    [_, routine] = await eventually(lambda: _two_refusals(c))
    assert "`* * * * *` fires 1 minute apart" in routine
    assert await store.runtime() == {}
    await c.send("/schedule */5 * * * * every five minutes")
    await eventually(lambda: texts_with(c, "dm-alice", "Scheduled: */5 * * * * (UTC)"))
    assert len(await store.runtime()) == 1
    assert await c.cards("dm-alice") == [], "a routine card or a turn"
    # The admin API is the operator's, not a chat member's: not held to the minimum.
    fast = {"id": "fast", "cron": "*/1 * * * * *", "text": "t", "enabled": False}
    status, body = await admin_post(c, fast)
    assert status == 200 and body["result"]["cron"] == "*/1 * * * * *", body


async def _two_refusals(client: ConsoleClient) -> list[str] | None:
    found = await texts_with(client, "dm-alice", "Not scheduled")
    return found if len(found) == 2 else None


async def admin_post(client: ConsoleClient, fields: dict[str, Any]) -> tuple[int, Any]:
    body = {"integrationId": "console", "chatId": "team", "chatType": "group", **fields}
    headers = {"Authorization": f"Bearer {TOKEN}"}
    url = client.base + "/v1.0/schedules"
    async with client.http.post(url, json=body, headers=headers) as resp:
        return resp.status, await resp.json()


async def test_a_lower_minimum_may_be_configured(gateways: Callable[..., Any], prefix: str) -> None:
    gw = await gateways(config(prefix, scheduleMinIntervalSeconds=60))
    c = gw.client
    await c.send("/schedule 0,1 * * * * x")
    await eventually(lambda: texts_with(c, "dm-alice", "Scheduled: 0,1 * * * *"))
    await c.send("/schedule */30 * * * * * x")
    [refused] = await eventually(lambda: texts_with(c, "dm-alice", "Not scheduled"))
    assert "at most once every 1 minute, and `*/30 * * * * *` fires 30 seconds apart" in refused


async def test_schedule_fires_count_against_the_chats_budget(
    gateways: Callable[..., Any], prefix: str
) -> None:
    limits = {"turnsPerHourPerChat": 2}
    gw: InProcessGateway = await gateways(config(prefix, limits=limits))
    every5 = {
        "id": "every5",
        "integrationId": "console",
        "chatId": "team",
        "chatType": "group",
        "cron": "*/5 * * * * *",
        "text": "tick",
    }
    base = (int(datetime.now(UTC).timestamp() * 1000) // 60_000 - 10) * 60_000
    clock = [base + 1_000]
    scheduler = clocked_scheduler(gw, config(prefix, every5, limits=limits), clock)
    await scheduler.tick()  # first sight: fires from now on
    for n in (1, 2):  # within the budget: each fire is a turn
        clock[0] = base + n * 5_000 + 50
        await scheduler.tick()
        await gw.client.wait_cards("team", count=n)
    clock[0] = base + 15_050
    with capture_logs() as logs:
        await scheduler.tick()
    [skipped] = [e for e in logs if e["event"] == "schedule fire skipped: over a budget"]
    assert skipped["schedule_id"] == "every5" and skipped["limit"] == "chat"
    cards = await gw.client.wait_cards("team", count=3, status=None)
    notice = cards[-1]["card"]
    assert notice["title"] == "Scheduled run skipped" and notice["buttons"] == []
    assert notice["answer"].startswith(
        "This scheduled run was skipped: this chat has reached its limit of 2 questions an hour."
    )
    assert scheduler.fired == 2

    async def refused() -> list[dict[str, Any]] | None:
        _, body = await admin(gw.client, "GET", "/v1.0/audit", outcome="refused")
        found: list[dict[str, Any]] = body["result"]
        return found or None

    [record] = await eventually(refused)
    assert record["trigger"]["kind"] == "schedule" and record["trigger"]["id"] == "every5"
    # The fire was skipped, not kept for later: the next tick runs nothing more.
    clock[0] = base + 15_500
    await scheduler.tick()
    assert len(await gw.client.cards("team")) == 3
    assert all(c["card"]["status"] == "done" for c in cards[:2])


async def test_a_chat_schedule_made_under_a_lower_minimum_is_held_not_fired(
    gateways: Callable[..., Any], prefix: str
) -> None:
    """One made before the minimum existed (or before it was raised): the scheduler holds it."""
    gw: InProcessGateway = await gateways(config(prefix, scheduleMinIntervalSeconds=0))
    gw.gateway.scheduler.stop()  # the test's scheduler fires, on the test's clock
    c, book = gw.client, gw.gateway.intake.schedules.book
    await c.send("/schedule */1 * * * * * x")
    await eventually(lambda: texts_with(c, "dm-alice", "Scheduled: */1 * * * * *"))
    [entry] = await book.entries("console", "dm-alice")
    assert entry.cron is not None

    def scheduler(minimum: int) -> Scheduler:
        return clocked_scheduler(gw, config(prefix, scheduleMinIntervalSeconds=minimum), clock)

    fire = entry.cron.next_after(entry.schedule.created_at) + 2_000
    clock = [fire + 50]
    held = scheduler(300)
    with capture_logs() as logs:
        await held.tick()
    assert held.fired == 0
    [warned] = [e for e in logs if e["event"].startswith("schedule made in a chat fires too")]
    assert warned["schedule_id"] == entry.schedule.id and "1 second apart" in warned["error"]
    allowed = scheduler(0)
    await allowed.tick()
    assert allowed.fired == 1
    await c.wait_cards("dm-alice", count=1)
