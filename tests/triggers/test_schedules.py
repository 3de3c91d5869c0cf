"""Scheduled turns end to end (real Redis, console chats): exactly one card per fire across two
replicas, misfires after a restart, DST through the scheduler, the admin API and the chat
commands. Routines said in plain words: tests/triggers/test_schedules_routines.py."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from structlog.testing import capture_logs

from gateway.clock import now_ms
from gateway.config.file import load_settings
from gateway.config.settings import Settings
from gateway.envelope import Envelope
from gateway.runtime.cli import settings_model
from gateway.triggers.schedules import Scheduler
from tests.support.clock import FakeClock, aligned
from tests.support.configs import base_config
from tests.support.helpers import ConsoleClient, Gateways, InProcessGateway
from tests.support.redis_targets import BOTH_REDIS
from tests.support.waits import eventually

TOKEN = "admin-secret-token"


def schedule(**fields: Any) -> dict[str, Any]:
    return {
        "id": "every5",
        "integrationId": "console",
        "chatId": "team",
        "chatType": "group",
        "cron": "*/5 * * * * *",
        "text": "tick",
        **fields,
    }


def config(prefix: str, *schedules: dict[str, Any], **integration: Any) -> dict[str, Any]:
    cfg = base_config(prefix, **integration)
    cfg["admin"] = {"token": TOKEN}
    cfg["schedules"] = list(schedules)
    return cfg


class Recorder:
    """The real intake, recording what the scheduler hands it."""

    def __init__(self, gw: InProcessGateway) -> None:
        self.gw = gw
        self.seen: list[Envelope] = []

    async def __call__(self, envelope: Envelope) -> Any:
        self.seen.append(envelope)
        return await self.gw.gateway.pipeline.ingest(envelope)


def scheduler_at(
    gw: InProcessGateway, settings: Settings, clock: list[int], prefix: str
) -> tuple[Scheduler, Recorder]:
    """A scheduler on the gateway's Redis and intake whose clock the test moves."""
    recorder = Recorder(gw)
    store = gw.gateway.intake.schedules.book.store
    scheduler = Scheduler(
        store=store,
        settings=lambda: settings,
        ingest=recorder,
        adapters=gw.gateway.adapters,
        owner="test-replica",
        clock=lambda: clock[0],
    )
    return scheduler, recorder


def ms(text: str, zone: str = "UTC") -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone)).timestamp() * 1000)


async def admin(
    client: ConsoleClient,
    method: str,
    path: str,
    body: Any = None,
    token: str = TOKEN,
    **params: str,
) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"}
    kwargs: dict[str, Any] = {"headers": headers, "params": params}
    if isinstance(body, str):
        kwargs["data"] = body
        headers["Content-Type"] = "application/json"  # as admin bodies must be (else 415)
    elif body is not None:
        kwargs["json"] = body
    async with client.http.request(method, client.base + path, **kwargs) as resp:
        return resp.status, await resp.json()


# --- exactly once across replicas -------------------------------------------------------------
@BOTH_REDIS
async def test_a_5_second_schedule_gives_one_card_per_fire_with_two_replicas(
    gateways: Gateways, prefix: str
) -> None:
    cfg = config(prefix, schedule())
    clock = FakeClock(aligned(5_000))  # both replicas on one clock the test moves
    a = await gateways(cfg, clock=clock)
    b = await gateways(cfg, clock=clock)
    await gateways.idle()  # both have looked once: the schedule fires from now on

    async def done(n: int) -> list[dict[str, Any]] | None:
        cards = await a.client.cards("team")
        finished = [c for c in cards if c["card"]["status"] == "done"]
        return cards if len(finished) >= n else None

    start = clock()
    for n in (1, 2, 3):  # each step passes one fire time, and both replicas look at once
        clock.advance(5_000)
        await eventually(partial(done, n))
        await gateways.idle()
    cards = await a.client.cards("team")
    fires = [int(c["replyTo"].rsplit(":", 1)[1]) for c in cards]
    assert all(c["replyTo"].startswith("schedule:every5:") for c in cards)
    assert len(set(fires)) == len(fires), "a fire with two cards"
    assert all(f % 5000 == 0 for f in fires)
    assert sorted(fires) == [start - 50 + k * 5_000 for k in (1, 2, 3)], "a fire missed"
    assert a.gateway.scheduler.fired + b.gateway.scheduler.fired == len(fires)
    assert all("You said:\n> tick" in c["card"]["answer"] for c in cards if c["card"]["answer"])


async def test_on_the_real_clock_a_fire_starts_at_its_time(
    gateways: Callable[..., Any], prefix: str
) -> None:
    """No test clock: the scheduler sleeps until the fire time and starts the fire then."""
    gw = await gateways(config(prefix, schedule(id="sec", cron="* * * * * *")))
    scheduler = gw.gateway.scheduler
    started: list[tuple[str, int]] = []
    ingest = scheduler.ingest

    async def noted(envelope: Envelope) -> Any:
        started.append((envelope.event_id, now_ms()))
        return await ingest(envelope)

    scheduler.ingest = noted
    await gw.client.wait_cards("team", count=2, status=None, timeout=10)
    for event_id, at in started[:2]:
        fire = int(event_id.rsplit(":", 1)[1])
        assert 0 <= at - fire < 500, (event_id, at)


# --- restarts: misfire grace ------------------------------------------------------------------
async def test_a_missed_fire_within_the_grace_runs_once_and_older_ones_are_skipped(
    gateways: Callable[..., Any], prefix: str
) -> None:
    gw = await gateways(config(prefix))  # its own scheduler has nothing to do
    settings = load_settings(
        config(prefix, schedule(id="minutely", cron="0 * * * * *", misfireGraceSeconds=10)),
        model=settings_model(),
    )
    base = (gw.gateway.scheduler.clock() // 60_000 - 10) * 60_000  # a minute boundary, past
    clock = [base + 1_000]
    scheduler, recorder = scheduler_at(gw, settings, clock, prefix)
    await scheduler.tick()  # first sight: fires from now on
    assert recorder.seen == []
    # Down for three minutes; back 4 s after the third missed fire: that one runs, two skipped.
    clock[0] = base + 184_000
    scheduler, recorder = scheduler_at(gw, settings, clock, prefix)  # a restarted replica
    with capture_logs() as logs:
        await scheduler.tick()
        await scheduler.tick()  # nothing more: the fire is recorded
    assert [e.event_id for e in recorder.seen] == [f"schedule:minutely:{base + 180_000}"]
    [skipped] = [e for e in logs if e["event"] == "schedule misfire skipped"]
    assert skipped["schedule_id"] == "minutely" and skipped["count"] == 2
    newest = datetime.fromtimestamp((base + 120_000) / 1000, ZoneInfo("UTC"))
    assert skipped["fire_time"] == newest.isoformat()
    # Down again; back 30 s after the newest missed fire: beyond the grace, nothing runs.
    clock[0] = base + 330_000
    scheduler, recorder = scheduler_at(gw, settings, clock, prefix)
    with capture_logs() as logs:
        await scheduler.tick()
    assert recorder.seen == []
    [skipped] = [e for e in logs if e["event"] == "schedule misfire skipped"]
    assert skipped["count"] == 2  # 240 s and 300 s
    cards = await gw.client.wait_cards("team", count=1)
    assert [c["replyTo"] for c in cards] == [f"schedule:minutely:{base + 180_000}"]
    # The next fire on time runs again.
    clock[0] = base + 360_050
    await scheduler.tick()
    assert [e.event_id for e in recorder.seen] == [f"schedule:minutely:{base + 360_000}"]


# --- DST through the scheduler ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("zone", "day", "fire"),
    [
        ("Europe/Berlin", "2026-10-25", "2026-10-25T02:30:00+02:00"),  # fall back
        ("Europe/Berlin", "2026-03-29", "2026-03-29T03:00:00+02:00"),  # spring forward
        ("America/New_York", "2026-11-01", "2026-11-01T02:30:00-05:00"),
        ("America/New_York", "2026-03-08", "2026-03-08T03:00:00-04:00"),
    ],
)
async def test_a_0230_daily_schedule_fires_once_across_a_dst_change(
    gateways: Callable[..., Any], prefix: str, zone: str, day: str, fire: str
) -> None:
    gw = await gateways(config(prefix))
    settings = load_settings(
        config(prefix, schedule(id="night", cron="30 2 * * *", timezone=zone)),
        model=settings_model(),
    )
    clock = [ms(f"{day}T00:00:00", zone)]
    scheduler, recorder = scheduler_at(gw, settings, clock, prefix)
    end = clock[0] + 6 * 3_600_000  # through 05:00-06:00 local, real time
    while clock[0] < end:
        await scheduler.tick()
        clock[0] += 30_000
    expected = int(datetime.fromisoformat(fire).timestamp() * 1000)
    assert [e.event_id for e in recorder.seen] == [f"schedule:night:{expected}"]
    [card] = await gw.client.wait_cards("team", count=1)
    assert card["replyTo"] == f"schedule:night:{expected}"


# --- admin API --------------------------------------------------------------------------------
async def test_admin_api_lists_creates_and_deletes_schedules(
    gateways: Callable[..., Any], prefix: str
) -> None:
    gw = await gateways(
        config(prefix, schedule(id="daily", cron="0 9 * * 1-5"), timezone="Asia/Shanghai")
    )
    c = gw.client
    status, body = await admin(c, "GET", "/v1.0/schedules", token="wrong")
    assert status == 401
    new = {
        "id": "nightly",
        "integrationId": "console",
        "chatId": "dm-alice",
        "chatType": "p2p",
        "cron": "0 0 22 * * *",
        "timezone": "Europe/Berlin",
        "text": "wrap up the day",
    }
    status, body = await admin(c, "POST", "/v1.0/schedules", new)
    assert status == 200, body
    made = body["result"]
    assert made["source"] == "runtime" and made["origin"] == "admin"
    assert made["timezone"] == "Europe/Berlin" and made["createdAt"] > 0
    assert made["nextFireAt"].endswith(("+01:00", "+02:00")) and "T22:00:00" in made["nextFireAt"]
    status, body = await admin(c, "POST", "/v1.0/schedules", new)
    assert (status, body["code"]) == (409, "conflict")
    for change, fragment in [
        ({"cron": "0 9 * *"}, "has 4 fields"),
        ({"cron": "0 61 * * *"}, "not a valid cron"),
        ({"timezone": "Mars/Base"}, "unknown time zone 'Mars/Base'"),
        ({"integrationId": "nope"}, "unknown integration 'nope'"),
        ({"xpertId": "gpt"}, "xpertId 'gpt' names no expert"),
        ({"chatType": "channel"}, "chatType"),
        ({"colour": "red"}, "colour: unknown field"),
        ({"source": "config"}, "source: set by the gateway"),
    ]:
        status, body = await admin(c, "POST", "/v1.0/schedules", {**new, "id": "x", **change})
        assert status == 400 and fragment in body["msg"], (change, body)
    status, body = await admin(c, "POST", "/v1.0/schedules", "{not json")
    assert status == 400 and "JSON" in body["msg"]
    status, body = await admin(c, "POST", "/v1.0/schedules", {**new, "id": "daily"})
    assert (status, body["code"]) == (409, "conflict")
    # without an id, one is made up
    status, body = await admin(c, "POST", "/v1.0/schedules", {**new, "id": "a1"})
    assert status == 200
    payload = {k: v for k, v in new.items() if k != "id"}
    status, body = await admin(c, "POST", "/v1.0/schedules", payload)
    assert status == 200 and body["result"]["id"].startswith("s-")
    status, body = await admin(c, "GET", "/v1.0/schedules")
    listed = {s["id"]: s for s in body["result"]}
    assert list(listed)[:1] == ["daily"] and set(listed) >= {"daily", "nightly", "a1"}
    assert listed["daily"]["source"] == "config" and listed["daily"]["timezone"] == "Asia/Shanghai"
    assert listed["daily"]["nextFireAt"].endswith("T09:00:00+08:00")
    status, body = await admin(c, "GET", "/v1.0/schedules", chatId="team")
    assert [s["id"] for s in body["result"]] == ["daily"]
    status, body = await admin(c, "DELETE", "/v1.0/schedules/daily")
    assert (status, body["code"]) == (409, "conflict")
    status, body = await admin(c, "DELETE", "/v1.0/schedules/nightly")
    assert status == 200 and body["result"] == {"id": "nightly", "deleted": True}
    status, body = await admin(c, "DELETE", "/v1.0/schedules/nightly")
    assert (status, body["code"]) == (404, "not_found")
    status, body = await admin(c, "DELETE", "/v1.0/schedules", id="a1")
    assert status == 200
    status, body = await admin(c, "GET", "/v1.0/schedules")
    assert "nightly" not in {s["id"] for s in body["result"]}


async def test_a_schedule_made_through_the_admin_api_fires(
    gateways: Callable[..., Any], prefix: str
) -> None:
    clock = FakeClock(aligned(2_000))
    gw = await gateways(config(prefix), clock=clock)
    body = schedule(id="api2", cron="*/2 * * * * *", chatId="dm-bob", chatType="p2p", text="hi")
    status, _ = await admin(gw.client, "POST", "/v1.0/schedules", body)
    assert status == 200
    clock.advance(2_000)  # past its first fire time
    cards = await gw.client.wait_cards("dm-bob", count=1)
    assert cards[0]["replyTo"].startswith("schedule:api2:")
    status, _ = await admin(gw.client, "DELETE", "/v1.0/schedules/api2")
    assert status == 200
    await gw.idle()  # a look that read it before the delete has ended
    settled = len(await gw.client.cards("dm-bob"))
    for _ in range(3):  # three more fire times pass
        clock.advance(2_000)
        await gw.idle()
    assert len(await gw.client.cards("dm-bob")) == settled == 1, "a deleted schedule fired"


# --- chat commands ----------------------------------------------------------------------------
async def texts_with(client: ConsoleClient, chat: str, fragment: str) -> list[str]:
    return [t for t in await client.texts(chat) if fragment in t]


async def test_schedule_commands_in_a_direct_chat(
    gateways: Callable[..., Any], prefix: str
) -> None:
    mine = schedule(id="cfg", chatId="dm-alice", chatType="p2p", cron="0 9 * * *")
    gw = await gateways(config(prefix, mine, timezone="Asia/Shanghai"))
    c = gw.client
    await c.send("/schedule 30 8 * * 1-5 summarize my inbox")
    [reply] = await eventually(lambda: texts_with(c, "dm-alice", "Scheduled:"))
    assert "30 8 * * 1-5 (Asia/Shanghai) summarize my inbox" in reply
    assert reply.count("+08:00") == 0 and reply.count("CST") == 3  # next three, local time
    await c.send("/schedule 61 8 * * * nope")
    [bad] = await eventually(lambda: texts_with(c, "dm-alice", "not a valid cron"))
    assert "Usage: /schedule <cron> <text>" in bad
    await c.send("/schedules")
    [listing] = await eventually(lambda: texts_with(c, "dm-alice", "This chat's schedules"))
    lines = listing.splitlines()[1:]
    assert lines[0].startswith("1. 0 9 * * * (Asia/Shanghai) tick - next ")
    assert lines[0].endswith("(config file)")
    assert lines[1].startswith("2. 30 8 * * 1-5 (Asia/Shanghai) summarize my inbox - next ")
    await c.send("/unschedule 1")
    await eventually(lambda: texts_with(c, "dm-alice", "Not removed: schedule 'cfg' is in the"))
    await c.send("/unschedule 7")
    await eventually(lambda: texts_with(c, "dm-alice", "Usage: /unschedule <n>"))
    await c.send("/unschedule 2")
    await eventually(lambda: texts_with(c, "dm-alice", "Removed schedule 2: 30 8 * * 1-5"))
    runtime = await gw.gateway.intake.schedules.book.store.runtime()
    assert runtime == {}
    assert not await c.cards("dm-alice"), "a command started a turn"


async def test_only_schedule_admins_change_a_groups_schedules(
    gateways: Callable[..., Any], prefix: str
) -> None:
    gw = await gateways(config(prefix, scheduleAdmins=["bob"]))
    c = gw.client
    await c.send("/schedule 0 9 * * 1 weekly plan", chat="team", sender="alice", mention=True)
    await eventually(lambda: texts_with(c, "team", "Only this chat's schedule admins"))
    await c.send("/schedule 0 9 * * 1 weekly plan", chat="team", sender="bob", mention=True)
    await eventually(lambda: texts_with(c, "team", "Scheduled: 0 9 * * 1 (UTC) weekly plan"))
    await c.send("/schedules", chat="team", sender="alice", mention=True)  # anyone may look
    await eventually(lambda: texts_with(c, "team", "1. 0 9 * * 1 (UTC) weekly plan"))
    await c.send("/unschedule 1", chat="team", sender="alice", mention=True)
    await eventually(lambda: _all(c, "team", "Only this chat's schedule admins"), timeout=5)
    await gw.idle()
    assert len(await gw.gateway.intake.schedules.book.store.runtime()) == 1
    [entry] = await gw.gateway.intake.schedules.book.entries("console", "team")
    assert entry.schedule.created_by == "bob" and entry.source == "runtime"
    # A direct chat is the user's own: no admin list applies there.
    await c.send("/schedule 0 7 * * * wake up", chat="dm-alice", sender="alice")
    await eventually(lambda: texts_with(c, "dm-alice", "Scheduled: 0 7 * * *"))


async def _all(client: ConsoleClient, chat: str, fragment: str) -> list[str]:
    found = await texts_with(client, chat, fragment)
    return found if len(found) >= 2 else []


async def test_a_reload_adds_and_removes_config_schedules(
    gateways: Callable[..., Any], prefix: str
) -> None:
    clock = FakeClock(aligned(1_000))
    gw = await gateways(config(prefix), clock=clock)
    store = gw.gateway.intake.schedules.book.store
    with_one = config(prefix, schedule(id="hot", cron="* * * * * *", chatId="dm-carol",
                                       chatType="p2p"))  # fmt: skip
    await gw.gateway.reload(load_settings(with_one, model=settings_model()))
    await eventually(lambda: _seen(store, "hot"))  # the scheduler read the new settings
    clock.advance(1_000)
    await gw.client.wait_cards("dm-carol", count=1, status=None)
    await gw.gateway.reload(load_settings(config(prefix), model=settings_model()))
    await gw.idle()  # a look that read the old settings may still have fired: it has ended
    settled = len(await gw.client.cards("dm-carol"))
    for _ in range(3):  # three more fire times pass
        clock.advance(1_000)
        await gw.idle()
    assert len(await gw.client.cards("dm-carol")) == settled == 1, "a removed schedule fired"


async def _seen(store: Any, schedule_id: str) -> bool:
    return schedule_id in await store.last_fires()
