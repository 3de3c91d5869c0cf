"""Budgets at intake against a real Redis (the shared one and a 3-primary cluster), through the
pipeline with an injected clock: a message that opens a burst is a turn, counted in the step that
stores it; over a limit nothing is stored; the window slides; a sender's limit; the tokens of a
day; a refusal is remembered per event; replicas racing at a limit never let a turn too many
through. The end-to-end path (the polite answer in the chat, the usage API) is in
test_bundles.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis.asyncio as aioredis

from gateway.config.file import load_settings
from gateway.config.settings import Settings
from gateway.edge.ingest import IngestOutcome
from gateway.envelope import Chat, Envelope, Sender
from gateway.ops.usage_api import usage_of
from gateway.policy.budgets import Budgets, day_of, limits_for
from gateway.runtime.cli import settings_model
from gateway.runtime.intake import Intake, build_intake
from sessions import BurstWrite, KeyBuilder, SessionRecords, SessionStore
from sessions.budgets import BudgetIntakeResult
from tests.support.configs import base_config
from tests.support.redis_targets import BOTH_REDIS, RedisTarget

pytestmark = BOTH_REDIS

SHANGHAI = ZoneInfo("Asia/Shanghai")
T0 = int(datetime(2026, 3, 2, 9, 4, 30, tzinfo=SHANGHAI).timestamp() * 1000)
TEAM = "console|group:team"
HOUR = 3_600_000


@dataclass
class Clock:
    now: int = T0

    def __call__(self) -> int:
        return self.now


@dataclass
class Rig:
    """Pipelines of "replicas" (each its own store and connection) on one Redis, one clock."""

    stores: list[SessionStore]
    settings: Settings
    clock: Clock
    pipelines: list[Intake]
    tasks: list[asyncio.Future[Any]] = field(default_factory=list)
    claimed: list[list[str]] = field(default_factory=list)

    @property
    def store(self) -> SessionStore:
        return self.stores[0]

    async def send(
        self,
        text: str,
        event_id: str,
        *,
        sender: str = "bob",
        chat: str = "team",
        replica: int = 0,
    ) -> IngestOutcome:
        envelope = Envelope(
            integration_id="console",
            platform="console",
            event_id=event_id,
            chat=Chat(id=chat, type="group"),
            sender=Sender(id=sender, name=sender.title()),
            text=text,
            bot_mentioned=True,
        )
        return await self.pipelines[replica].pipeline.ingest(envelope)

    async def burst(self, conv: str = TEAM) -> list[str]:
        return [i["eventId"] for i in await self.store.burst_items(conv)]

    async def run_turn(self, conv: str = TEAM) -> list[str]:
        """What a flusher does once the burst is due: claim it, finish; the event ids."""
        now = self.clock.now + 60_000  # the intake clock only: due, whatever the window
        claim = await self.store.claim(
            conversation=conv, owner="o", turn_id=f"t{now}", now_ms=now, lease_ms=5000
        )
        if claim is None:
            return []
        await self.store.finish(conversation=conv, owner="o", now_ms=now)
        ids = [str(i["eventId"]) for i in claim.items]
        self.claimed.append(ids)
        return ids


@pytest.fixture
async def make_rig(
    redis_client: aioredis.Redis, redis_target: RedisTarget, prefix: str
) -> AsyncIterator[Any]:
    rigs: list[Rig] = []
    clients: list[Any] = []

    async def make(replicas: int = 1, routes: Any = (), **integration: Any) -> Rig:
        cfg = base_config(prefix, timezone="Asia/Shanghai", **integration)
        cfg["integrations"][0]["routes"] = list(routes)
        settings = load_settings(cfg, model=settings_model())
        rig = Rig(stores=[], settings=settings, clock=Clock(), pipelines=[])
        rigs.append(rig)

        def spawn(coro: Awaitable[Any]) -> None:
            rig.tasks.append(asyncio.ensure_future(coro))

        for i in range(replicas):
            client = redis_client if i == 0 else redis_target.client()
            if i:
                clients.append(client)
            store = SessionStore(client=client, keys=KeyBuilder(prefix=prefix))
            await store.prepare()
            rig.stores.append(store)
            rig.pipelines.append(
                build_intake(
                    store=store,
                    records=SessionRecords(client=client, keys=store.keys),
                    settings=lambda: settings,
                    adapters={},
                    wake=lambda _due, _conv: None,
                    spawn=spawn,
                    clock=rig.clock,
                )
            )
        return rig

    yield make
    for rig in rigs:  # the audit records the pipelines spawned
        await asyncio.gather(*rig.tasks)
        for store in rig.stores:
            await store.close()
    for client in clients:
        await client.aclose()


async def test_a_chat_over_its_hourly_limit_is_refused_until_the_window_slides(
    make_rig: Any, redis_client: aioredis.Redis
) -> None:
    rig: Rig = await make_rig(limits={"turnsPerHourPerChat": 2})
    assert (await rig.send("one", "e1")).status == "queued"
    await rig.run_turn()
    rig.clock.now += 20 * 60_000
    assert (await rig.send("two", "e2")).status == "queued"
    await rig.run_turn()
    rig.clock.now += 20 * 60_000
    assert await rig.send("three", "e3") == IngestOutcome("refused", "chat")
    assert await rig.burst() == []  # nothing stored, nothing queued behind it
    assert await rig.store.burst_length(TEAM) == 0
    # One minute before the first turn leaves the window: still refused; then free again.
    rig.clock.now = T0 + HOUR - 1
    assert (await rig.send("four", "e4")).status == "refused"
    rig.clock.now = T0 + HOUR
    assert (await rig.send("five", "e5")).status == "queued"
    assert await rig.run_turn() == ["e5"]
    usage = await usage_of(rig.pipelines[0].budgets, rig.settings.integrations[0], None)
    assert usage["chats"] == [
        {"chatId": "team", "turnsLastHour": 2, "tokensToday": 0, "refusedToday": 2}
    ]


async def test_a_burst_of_merged_messages_is_one_turn(make_rig: Any) -> None:
    rig: Rig = await make_rig(
        limits={"turnsPerHourPerChat": 1}, summaryWindowSeconds=2, maxWindowSeconds=10
    )
    outcomes = [await rig.send(f"part {i}", f"e{i}") for i in range(3)]
    assert [o.status for o in outcomes] == ["queued"] * 3
    assert await rig.run_turn() == ["e0", "e1", "e2"]
    assert (await rig.send("another question", "e3")).status == "refused"


async def test_messages_during_a_running_turn_open_the_next_turn(make_rig: Any) -> None:
    rig: Rig = await make_rig(limits={"turnsPerHourPerChat": 2})
    store = rig.store
    assert (await rig.send("first", "e1")).status == "queued"
    claim = await store.claim(
        conversation=TEAM, owner="o", turn_id="t1", now_ms=T0 + 60_000, lease_ms=60_000
    )
    assert claim is not None  # the turn runs; two messages collect into the next one
    assert (await rig.send("while running", "e2")).status == "queued"
    assert (await rig.send("and this", "e3")).status == "queued"
    assert (await rig.send("too many", "e4", sender="carol")).status == "queued"  # merged
    await store.finish(conversation=TEAM, owner="o", now_ms=T0 + 61_000)
    rig.clock.now += 2 * 60_000
    assert await rig.run_turn() == ["e2", "e3", "e4"]
    assert (await rig.send("third turn", "e5")).status == "refused"


async def test_a_senders_limit_leaves_the_others_free(make_rig: Any) -> None:
    rig: Rig = await make_rig(limits={"turnsPerHourPerSender": 1, "turnsPerHourPerChat": 5})
    assert (await rig.send("bob asks", "e1")).status == "queued"
    await rig.run_turn()
    assert await rig.send("bob again", "e2") == IngestOutcome("refused", "sender")
    assert (await rig.send("carol asks", "e3", sender="carol")).status == "queued"
    await rig.run_turn()
    assert (await rig.send("carol again", "e4", sender="carol")).status == "refused"
    assert (await rig.send("dave asks", "e5", sender="dave")).status == "queued"


async def test_a_route_overrides_the_integrations_limits(make_rig: Any) -> None:
    routes = [
        {"chatId": "vip", "limits": {"turnsPerHourPerChat": None}},
        {"chatPattern": "lab-*", "limits": {"turnsPerHourPerSender": 1}},
    ]
    rig: Rig = await make_rig(routes=routes, limits={"turnsPerHourPerChat": 1})
    integ = rig.settings.integrations[0]
    for i in range(3):  # the route lifts the chat limit
        assert (await rig.send("q", f"v{i}", chat="vip")).status == "queued"
        await rig.run_turn("console|group:vip")
    lab = "console|group:lab-7"
    assert (await rig.send("q", "l1", chat="lab-7")).status == "queued"
    await rig.run_turn(lab)
    # The lab route keeps the integration's chat limit and adds its own per sender.
    assert await rig.send("q", "l2", chat="lab-7", sender="carol") == IngestOutcome(
        "refused", "chat"
    )
    usage = await usage_of(rig.pipelines[0].budgets, integ, "lab-7")
    assert usage["limits"] == {
        "turnsPerHourPerChat": 1,
        "turnsPerHourPerSender": 1,
        "tokensPerDayPerChat": None,
    }
    assert usage["chats"] == [
        {"chatId": "lab-7", "turnsLastHour": 1, "tokensToday": 0, "refusedToday": 1}
    ]


async def test_a_refusal_is_remembered_per_event(make_rig: Any) -> None:
    rig: Rig = await make_rig(replicas=2, limits={"turnsPerHourPerChat": 1})
    assert (await rig.send("one", "e1")).status == "queued"
    await rig.run_turn()
    assert (await rig.send("two", "e2")).status == "refused"
    # Redelivered to the other replica, later: the same verdict, not counted again.
    rig.clock.now += 60_000
    assert await rig.send("two", "e2", replica=1) == IngestOutcome("duplicate")
    result = await rig.pipelines[1].budgets.intake(
        rig.settings.integrations[0],
        Envelope(
            integration_id="console",
            platform="console",
            event_id="e2",
            chat=Chat(id="team", type="group"),
            sender=Sender(id="bob"),
            text="two",
        ),
        BurstWrite(TEAM, "e2", "{}", now_ms=rig.clock.now, window_ms=0, max_window_ms=5000),
    )
    assert (result.status, result.limit, result.retry_ms) == ("again", "chat", T0 + HOUR)
    # An hour after the first turn the chat is free, but this event stays answered.
    rig.clock.now = T0 + HOUR
    assert (await rig.send("two", "e2")).status == "duplicate"
    assert await rig.burst() == []
    usage = await usage_of(rig.pipelines[0].budgets, rig.settings.integrations[0], "team")
    assert usage["chats"][0]["refusedToday"] == 1


async def test_tokens_of_the_day_close_the_chat_until_midnight(make_rig: Any) -> None:
    rig: Rig = await make_rig(limits={"tokensPerDayPerChat": 100})
    integ = rig.settings.integrations[0]
    budgets: Budgets = rig.pipelines[0].budgets
    assert (await rig.send("one", "e1")).status == "queued"
    await rig.run_turn()
    await budgets.spend(integ, TEAM, 60)
    assert (await rig.send("two", "e2")).status == "queued"  # 60 < 100: the turn runs
    await rig.run_turn()
    await budgets.spend(integ, TEAM, 55)  # ... and crosses the budget
    outcome = await rig.send("three", "e3")
    assert outcome == IngestOutcome("refused", "tokens")
    midnight = int(datetime(2026, 3, 3, tzinfo=SHANGHAI).timestamp() * 1000)
    rig.clock.now = midnight - 1
    assert (await rig.send("four", "e4")).status == "refused"
    rig.clock.now = midnight  # a new day in Asia/Shanghai
    assert (await rig.send("five", "e5")).status == "queued"
    usage = await usage_of(budgets, integ, "team")
    assert usage["chats"] == [  # e5 is a turn of the last hour; the day's counts are new
        {"chatId": "team", "turnsLastHour": 1, "tokensToday": 0, "refusedToday": 0}
    ]
    rig.clock.now = midnight - 1
    yesterday = await usage_of(budgets, integ, "team")
    assert yesterday["chats"][0]["tokensToday"] == 115
    assert yesterday["chats"][0]["refusedToday"] == 2


async def test_replicas_racing_at_the_limit_never_let_a_turn_too_many_through(
    make_rig: Any,
) -> None:
    limit = 4
    rig: Rig = await make_rig(replicas=2, limits={"turnsPerHourPerChat": limit})
    statuses: list[str] = []
    for round_ in range(8):
        # Twelve messages at once over two replicas (two connections), then the turn runs.
        outcomes = await asyncio.gather(
            *(rig.send(f"q{round_}.{i}", f"e{round_}.{i}", replica=i % 2) for i in range(12))
        )
        statuses += [o.status for o in outcomes]
        await rig.run_turn()
    turns = [t for t in rig.claimed if t]
    assert len(turns) == limit
    accepted = sorted(e for t in turns for e in t)
    assert statuses.count("queued") == len(accepted) == 4 * 12  # each round merged into one
    assert statuses.count("refused") == 4 * 12
    assert await rig.burst() == []


async def test_the_refusal_says_when_in_the_integrations_zone_and_language(make_rig: Any) -> None:
    rig: Rig = await make_rig(limits={"turnsPerHourPerChat": 3})
    integ = rig.settings.integrations[0]
    budgets: Budgets = rig.pipelines[0].budgets
    env = Envelope(
        integration_id="console",
        platform="console",
        event_id="x",
        chat=Chat(id="team", type="group"),
        sender=Sender(id="bob"),
    )
    at_hour = BudgetIntakeResult("refused", 0, False, "chat", T0 + HOUR)  # 10:04:30 local
    assert budgets.refusal_text(integ, env, at_hour) == (
        "Sorry, this chat has reached its limit of 3 questions an hour. You can ask again at 10:05."
    )
    midnight = int(datetime(2026, 3, 3, tzinfo=SHANGHAI).timestamp() * 1000)
    tokens = BudgetIntakeResult("refused", 0, False, "tokens", midnight)
    assert budgets.refusal_text(integ, env, tokens) == (
        "Sorry, this chat has used up its budget for today. You can ask again tomorrow at 00:00."
    )
    chinese = integ.model_copy(update={"language": "zh-Hans"})
    assert budgets.refusal_text(chinese, env, at_hour) == (
        "抱歉，这个聊天每小时最多提问 3 次，次数已经用完了。请在 10:05 之后再问，谢谢理解。"
    )
    sender = BudgetIntakeResult("refused", 0, False, "sender", T0 + 26 * HOUR)
    assert budgets.refusal_text(chinese, env, sender) == (
        "抱歉，你在这里每小时的提问次数已经用完了。请在 明天 11:05 之后再问，谢谢理解。"
    )
    later = BudgetIntakeResult("refused", 0, False, "chat", T0 + 50 * HOUR)
    assert budgets.refusal_text(integ, env, later).endswith("ask again on 2026-03-04 at 11:05.")


def test_a_day_ends_at_local_midnight_on_short_and_long_days() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    spring = int(datetime(2026, 3, 29, 12, tzinfo=berlin).timestamp() * 1000)  # 23 hours
    day, end = day_of("Europe/Berlin", spring)
    assert day == "2026-03-29"
    assert end == int(datetime(2026, 3, 30, tzinfo=berlin).timestamp() * 1000)
    autumn = int(datetime(2026, 10, 25, 1, tzinfo=berlin).timestamp() * 1000)  # 25 hours
    start = int(datetime(2026, 10, 25, tzinfo=berlin).timestamp() * 1000)
    assert day_of("Europe/Berlin", autumn)[1] - start == 25 * HOUR
    assert day_of(None, 0) == ("1970-01-01", 86_400_000)


def test_limits_resolve_integration_then_first_route(prefix: str) -> None:
    cfg = base_config(prefix, limits={"turnsPerHourPerChat": 10, "tokensPerDayPerChat": 500})
    cfg["integrations"][0]["routes"] = [
        {"chatType": "p2p", "senderId": "boss", "limits": {"tokensPerDayPerChat": None}},
        {"chatPattern": "oc_team_*", "limits": {"turnsPerHourPerChat": 3}},
    ]
    integ = load_settings(cfg, model=settings_model()).integrations[0]

    def limits(chat: str, chat_type: str, sender: str) -> dict[str, int | None]:
        env = Envelope(
            integration_id="console",
            platform="console",
            event_id="x",
            chat=Chat(id=chat, type=chat_type),  # type: ignore[arg-type]
            sender=Sender(id=sender),
        )
        return limits_for(integ, env).as_json()

    assert limits("dm-boss", "p2p", "boss") == {
        "turnsPerHourPerChat": 10,
        "turnsPerHourPerSender": None,
        "tokensPerDayPerChat": None,
    }
    assert limits("oc_team_a", "group", "bob")["turnsPerHourPerChat"] == 3
    assert limits("oc_team_a", "group", "bob")["tokensPerDayPerChat"] == 500
    assert limits("oc_other", "group", "bob")["turnsPerHourPerChat"] == 10
