"""Group watch in the pipeline against a real Redis, with an injected clock: a match fires once
per cooldown per chat, matches merge while the burst is open, a redelivered event starts one turn
and claims the cooldown once, the decision is made once across replicas; on the shared Redis and
on a Redis Cluster."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis.asyncio as aioredis

from gateway.config.file import load_settings
from gateway.config.settings import Settings
from gateway.edge.ingest import IngestOutcome
from gateway.envelope import Chat, Envelope, Sender
from gateway.policy.routing import route
from gateway.runtime.cli import settings_model
from gateway.runtime.intake import Intake, build_intake
from gateway.triggers.watch_intake import GroupWatch
from gateway.turns.context import merge_input
from sessions import KeyBuilder, SessionRecords, SessionStore
from tests.support.configs import base_config
from tests.support.redis_targets import BOTH_REDIS

pytestmark = BOTH_REDIS

T0 = 1_700_000_000_000
CHAT_CONV = "console|group:team"
INCIDENTS = {
    "id": "incidents",
    "match": {"keywords": ["P0"]},
    "text": "Triage this.",
    "cooldownSeconds": 60,
}


@dataclass
class Clock:
    now: int = T0

    def __call__(self) -> int:
        return self.now


@dataclass
class Rig:
    """Pipelines of "replicas" sharing one Redis and one injected clock."""

    store: SessionStore
    settings: Settings
    clock: Clock
    pipelines: list[Intake]
    woken: list[str] = field(default_factory=list)
    tasks: list[asyncio.Future[Any]] = field(default_factory=list)

    async def send(
        self, text: str, event_id: str, *, sender: str = "bob", replica: int = 0, **fields: Any
    ) -> IngestOutcome:
        envelope = Envelope(
            integration_id="console",
            platform="console",
            event_id=event_id,
            chat=Chat(id=fields.pop("chat", "team"), type="group"),
            sender=Sender(id=sender, name=sender.title(), is_bot=fields.pop("bot", False)),
            text=text,
            **fields,
        )
        return await self.pipelines[replica].pipeline.ingest(envelope)

    async def burst(self, conv: str = CHAT_CONV) -> list[Envelope]:
        return [Envelope.from_json(i) for i in await self.store.burst_items(conv)]

    async def run_turn(self, conv: str = CHAT_CONV) -> list[Envelope]:
        """What a flusher does once the burst is due: claim it (the burst closes), finish."""
        self.clock.now += 10_000
        claim = await self.store.claim(
            conversation=conv,
            owner="o",
            turn_id=f"t{self.clock.now}",
            now_ms=self.clock.now,
            lease_ms=5000,
        )
        assert claim is not None
        await self.store.finish(conversation=conv, owner="o", now_ms=self.clock.now)
        return [Envelope.from_json(i) for i in claim.items]


def config(prefix: str, watches: list[dict[str, Any]], **integration: Any) -> dict[str, Any]:
    cfg = base_config(prefix, summaryWindowSeconds=2, maxWindowSeconds=10, **integration)
    cfg["integrations"][0]["watches"] = watches
    cfg["experts"].append({"id": "triage", "kind": "echo"})
    return cfg


@pytest.fixture
async def make_rig(redis_client: aioredis.Redis, prefix: str) -> AsyncIterator[Any]:
    stores: list[SessionStore] = []
    rigs: list[Rig] = []

    async def make(watches: list[dict[str, Any]], replicas: int = 1, **integration: Any) -> Rig:
        settings = load_settings(config(prefix, watches, **integration), model=settings_model())
        store = SessionStore(client=redis_client, keys=KeyBuilder(prefix=prefix))
        await store.prepare()
        stores.append(store)
        records = SessionRecords(client=redis_client, keys=store.keys)
        rig = Rig(store=store, settings=settings, clock=Clock(), pipelines=[])
        rigs.append(rig)

        def spawn(coro: Awaitable[Any]) -> None:
            rig.tasks.append(asyncio.ensure_future(coro))

        for _ in range(replicas):
            rig.pipelines.append(
                build_intake(
                    store=store,
                    records=records,
                    settings=lambda: settings,
                    adapters={},
                    wake=lambda _due, conv: rig.woken.append(conv),
                    spawn=spawn,
                    clock=rig.clock,
                )
            )
        return rig

    yield make
    for rig in rigs:  # the audit writes the pipelines spawned
        await asyncio.gather(*rig.tasks)
    for store in stores:
        await store.close()


async def test_a_match_fires_then_the_cooldown_holds_then_it_ends(make_rig: Any) -> None:
    rig: Rig = await make_rig([INCIDENTS])
    assert await rig.send("lunch anyone?", "e0") == IngestOutcome(
        "ignored", "group message without a mention"
    )
    assert await rig.send("P0: checkout is down", "e1") == IngestOutcome(
        "queued", "watch incidents fired"
    )
    assert rig.woken == [CHAT_CONV]
    [turn] = [await rig.run_turn()]
    assert [(e.kind, e.trigger and e.trigger.id) for e in turn] == [("watch", "incidents")]
    assert merge_input(turn) == "Triage this.\n\nBob: P0: checkout is down"
    rig.clock.now = T0 + 59_000  # within the 60 s: the match is the chat's chatter
    assert (await rig.send("P0 again", "e2")).status == "ignored"
    assert await rig.burst() == []
    rig.clock.now = T0 + 60_001  # the cooldown is over: a new turn
    assert await rig.send("P0 once more", "e3") == IngestOutcome("queued", "watch incidents fired")
    assert [e.event_id for e in await rig.run_turn()] == ["e3"]


async def test_matches_merge_while_the_burst_is_open(make_rig: Any) -> None:
    rig: Rig = await make_rig([INCIDENTS])
    assert (await rig.send("P0: checkout is down", "e1")).reason == "watch incidents fired"
    rig.clock.now += 500  # within summaryWindowSeconds: the burst is still unclaimed
    assert (await rig.send("P0 here too", "e2", sender="alice")).reason == (
        "watch incidents merged"
    )
    turn = await rig.run_turn()
    assert merge_input(turn) == "Triage this.\n\nBob: P0: checkout is down\nAlice: P0 here too"
    assert (await rig.send("P0 after the claim", "e3")).status == "ignored"  # cooling down


async def test_a_redelivered_match_starts_one_turn_and_claims_the_cooldown_once(
    make_rig: Any, redis_client: aioredis.Redis
) -> None:
    rig: Rig = await make_rig([INCIDENTS])
    assert (await rig.send("P0: checkout is down", "e1")).status == "queued"
    assert (await rig.send("P0: checkout is down", "e1")).status == "duplicate"
    assert len(await rig.run_turn()) == 1
    key = rig.store.keys.watch_cooldown(CHAT_CONV, "incidents")
    before = await redis_client.get(key)
    rig.clock.now = T0 + 61_000  # past the cooldown: a redelivery must still be a duplicate
    assert (await rig.send("P0: checkout is down", "e1")).status == "duplicate"
    assert await redis_client.get(key) == before  # ... and not claim the cooldown again
    assert json.loads(before)["eventId"] == "e1" and await redis_client.pttl(key) > 0
    assert (await rig.send("P0 new", "e2")).reason == "watch incidents fired"


async def test_two_replicas_decide_each_match_exactly_once(make_rig: Any) -> None:
    rig: Rig = await make_rig([INCIDENTS], replicas=2)
    # 20 different matching events and one event delivered to both replicas, all at once.
    sends = [rig.send(f"P0 #{i}", f"e{i}", replica=i % 2) for i in range(20)]
    sends += [rig.send("P0 twice", "dup", replica=r) for r in (0, 1)]
    outcomes = await asyncio.gather(*sends)
    reasons = [o.reason for o in outcomes]
    assert reasons.count("watch incidents fired") == 1
    assert reasons.count("watch incidents merged") == 20
    assert [o.status for o in outcomes].count("duplicate") == 1
    assert len(await rig.run_turn()) == 21  # one turn with every match
    outcomes = await asyncio.gather(*(rig.send("P0", f"l{i}", replica=i % 2) for i in range(10)))
    assert {o.status for o in outcomes} == {"ignored"}  # the burst was claimed: cooling down
    assert await rig.burst() == []


async def test_an_addressed_match_is_a_normal_message(
    make_rig: Any, redis_client: aioredis.Redis
) -> None:
    rig: Rig = await make_rig([INCIDENTS])
    outcome = await rig.send("P0: what now?", "e1", bot_mentioned=True)
    assert outcome == IngestOutcome("queued")
    [item] = await rig.burst()
    assert (item.kind, item.trigger) == ("message", None)
    assert await redis_client.get(rig.store.keys.watch_cooldown(CHAT_CONV, "incidents")) is None
    await rig.run_turn()
    assert (await rig.send("P0 unaddressed", "e2")).reason == "watch incidents fired"


async def test_bot_messages_never_match(make_rig: Any) -> None:
    rig: Rig = await make_rig([INCIDENTS])
    assert await rig.send("P0 alert from monitoring", "e1", bot=True) == IngestOutcome(
        "ignored", "sent by a bot"
    )
    assert await rig.burst() == []


async def test_the_first_enabled_matching_watch_decides(make_rig: Any) -> None:
    watches = [
        {"id": "off", "match": {"keywords": ["P0"]}, "enabled": False},
        {"id": "ops-only", "chatId": "ops", "match": {"keywords": ["P0"]}},
        {"id": "first", "match": {"keywords": ["down"]}, "cooldownSeconds": 60},
        {"id": "second", "match": {"keywords": ["P0"]}},
    ]
    rig: Rig = await make_rig(watches)
    assert (await rig.send("P0 down", "e1")).reason == "watch first fired"
    await rig.run_turn()
    # "first" is cooling down: the message is chatter, not offered to "second" (a redelivery
    # must meet the same watch, whatever the cooldowns are by then).
    assert (await rig.send("P0 down again", "e2")).status == "ignored"
    assert (await rig.send("P0 only", "e3")).reason == "watch second fired"
    assert (await rig.send("P0 in ops", "e4", chat="ops")).reason == "watch ops-only fired"


async def test_where_a_watch_turn_runs_and_with_which_expert(make_rig: Any) -> None:
    own = {"id": "own", "match": {"keywords": ["deploy"]}, "xpertId": "triage"}
    rig: Rig = await make_rig([INCIDENTS, own], sessionScope="chat_sender")
    await rig.send("P0", "e1")
    # chat_sender scope: a watch belongs to the chat, not to the sender whose message matched
    [matched] = await rig.burst(CHAT_CONV)
    assert route(rig.settings.integrations[0], matched) == "echo"
    await rig.send("deploy failed", "e2")
    [matched] = await rig.burst("console|group:team:t:watch:own")  # its own session ...
    assert route(rig.settings.integrations[0], matched) == "triage"  # ... with its expert


async def test_a_zero_cooldown_fires_for_every_match(make_rig: Any) -> None:
    rig: Rig = await make_rig([{**INCIDENTS, "cooldownSeconds": 0}])
    for i in range(3):
        assert (await rig.send("P0", f"e{i}")).reason == "watch incidents fired"
        await rig.run_turn()


async def test_runtime_watches_reach_other_replicas_within_the_cache_time(
    make_rig: Any,
) -> None:
    rig: Rig = await make_rig([])
    ticks = [0.0]
    other = GroupWatch(
        store=rig.store,
        settings=lambda: rig.settings,
        wake=lambda _due, _conv: None,
        spawn=lambda _coro: None,
        clock=rig.clock,
        monotonic=lambda: ticks[0],
    )
    integ = rig.settings.integrations[0]
    assert await other.entries(integ) == []
    made = json.dumps({"id": "late", "match": {"keywords": ["x"]}})
    await other.watches.put("console", "late", made)
    assert await other.entries(integ) == []  # cached
    ticks[0] = 2.0
    [entry] = await other.entries(integ)
    assert (entry.watch.id, entry.source, entry.enabled) == ("late", "runtime", True)
    await other.watches.set_enabled("console", "late", False)
    other.invalidate("console")  # what the admin API does on its own replica
    assert [e.enabled for e in await other.entries(integ)] == [False]
