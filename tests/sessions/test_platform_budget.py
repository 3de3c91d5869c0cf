"""The platform budgets shared by replicas (sessions/platform_budget.py) on the shared Redis and on
a Redis Cluster: sliding windows per bucket granting all or some of a take, the tightest bucket
deciding for all, two replicas never over a limit together, a bucket's room going first to the
replica whose calls waited longest (its line), pauses of an app or a bucket that only get
longer, the month's ledger with its cap and uncount, and every key with a TTL in its app's
slot."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from sessions import KeyBuilder, Line, MonthUsage, PlatformBudgets, SessionStore, Take, Window
from sessions.platform_budget import LEDGER_TTL_MS
from tests.support.redis_targets import BOTH_REDIS, RedisTarget
from tests.support.waits import eventually

pytestmark = BOTH_REDIS

APP = "lark:cli_a1b2"
MONTH = "2026-12"
REPLY = "api:reply"
CHAT = "chat:oc_x"


@pytest.fixture
async def budgets(redis_client: aioredis.Redis, prefix: str) -> AsyncIterator[PlatformBudgets]:
    store = SessionStore(client=redis_client, keys=KeyBuilder(prefix=prefix))
    yield PlatformBudgets(store=store)
    await store.close()


async def take(
    budgets: PlatformBudgets, buckets: list[tuple[str, list[Window]]], n: int = 1, **month: Any
) -> Take:
    return await budgets.take(APP, buckets, n, month=MONTH, **month)


async def redis_now(client: Any) -> float:
    seconds, micros = await client.time()
    return float(seconds) + micros / 1_000_000


async def test_calls_are_granted_up_to_the_limit_then_denied_until_the_first_leaves(
    budgets: PlatformBudgets, redis_client: aioredis.Redis
) -> None:
    reply = [(REPLY, [Window(3, 5)])]
    started = await redis_now(redis_client)
    for used in (1, 2, 3):
        assert await take(budgets, reply) == Take(1, 0.0, None, used)
    denied = await take(budgets, reply)
    elapsed = await redis_now(redis_client) - started
    assert (denied.granted, denied.denied_by, denied.month_used) == (0, REPLY, 3)
    assert 5 - elapsed - 0.05 <= denied.wait_s <= 5  # the first call leaves 5 s after it was made


async def test_the_window_slides_each_call_leaving_on_its_own(
    budgets: PlatformBudgets, redis_client: aioredis.Redis
) -> None:
    reply = [(REPLY, [Window(2, 1.0)])]
    assert (await take(budgets, reply)).granted == 1
    first = await redis_now(redis_client)  # the first call was made before this
    await eventually(lambda: _after(redis_client, first + 0.4), interval=0.02)  # Redis's clock
    assert (await take(budgets, reply)).granted == 1
    denied = await take(budgets, reply)
    assert denied.granted == 0 and 0 < denied.wait_s <= 0.6  # until the first leaves
    await eventually(lambda: _granted(budgets, reply), interval=0.02)
    # The second call is the oldest now: it leaves some 0.4 s after the first did, not at once
    # (nothing left) nor a whole window later (a window that restarts).
    denied = await take(budgets, reply)
    assert denied.granted == 0 and 0.2 < denied.wait_s < 0.8


async def test_a_small_window_empties_and_its_log_expires(
    budgets: PlatformBudgets, redis_client: aioredis.Redis
) -> None:
    reply = [(REPLY, [Window(1, 0.2)])]
    assert (await take(budgets, reply)).granted == 1
    denied = await take(budgets, reply)
    assert denied.granted == 0 and 0 < denied.wait_s <= 0.2
    await eventually(lambda: _granted(budgets, reply), interval=0.02)
    log = budgets.keys.platform_window(APP, REPLY, 200)
    assert 0 < await redis_client.pttl(log) <= 201
    await eventually(lambda: _gone(redis_client, log), interval=0.02)


async def test_a_take_of_several_is_granted_as_far_as_there_is_room(
    budgets: PlatformBudgets, redis_client: aioredis.Redis
) -> None:
    reply = [(REPLY, [Window(5, 60)])]
    assert await take(budgets, reply, 3) == Take(3, 0.0, None, 3)
    partial = await take(budgets, reply, 3)
    assert (partial.granted, partial.denied_by, partial.month_used) == (2, REPLY, 5)
    assert 59 < partial.wait_s <= 60
    assert (await take(budgets, reply, 3)).granted == 0
    # Five calls logged: members unique though made in one script call (one microsecond).
    assert await redis_client.zcard(budgets.keys.platform_window(APP, REPLY, 60_000)) == 5
    assert (await take(budgets, reply, 0)).denied_by == REPLY  # n is at least 1
    stats = budgets.store.pipe.stats
    assert stats.calls == 4 + stats.script_reloads  # one script call per take (NOSCRIPT: two)


async def test_the_tightest_bucket_decides_and_the_others_record_only_what_was_granted(
    budgets: PlatformBudgets, redis_client: aioredis.Redis
) -> None:
    keys = budgets.keys
    both = [(CHAT, [Window(2, 30)]), (REPLY, [Window(50, 1), Window(10, 60)])]
    partial = await take(budgets, both, 5)
    assert (partial.granted, partial.denied_by) == (2, CHAT)
    assert 29 < partial.wait_s <= 30
    assert await redis_client.zcard(keys.platform_window(APP, REPLY, 1000)) == 2
    assert await redis_client.zcard(keys.platform_window(APP, REPLY, 60_000)) == 2
    assert await redis_client.zcard(keys.platform_window(APP, CHAT, 30_000)) == 2
    assert (await take(budgets, [(REPLY, [Window(10, 60)])], 8)).granted == 8
    # Both full now: the wait is the longer one, when a call could pass both.
    denied = await take(budgets, both)
    assert (denied.granted, denied.denied_by) == (0, REPLY) and 59 < denied.wait_s <= 60


async def test_a_window_without_calls_denies_everything_for_its_length(
    budgets: PlatformBudgets,
) -> None:
    denied = await take(budgets, [(REPLY, [Window(0, 7)])], 3)
    assert denied == Take(0, 7.0, REPLY, 0)
    assert (await take(budgets, [(REPLY, [Window(-1, 2)])])).wait_s == 2.0


async def test_two_replicas_never_exceed_the_limit_together(
    budgets: PlatformBudgets, redis_target: RedisTarget, prefix: str, redis_client: aioredis.Redis
) -> None:
    other_client = redis_target.client()
    other = SessionStore(client=other_client, keys=KeyBuilder(prefix=prefix))
    replicas = [budgets, PlatformBudgets(store=other)]
    windows = [(REPLY, [Window(25, 60), Window(100, 1)]), (CHAT, [Window(40, 60)])]
    try:
        asks = [random.Random(i).randint(1, 3) for i in range(120)]
        takes = await asyncio.gather(
            *(take(replicas[i % 2], windows, n) for i, n in enumerate(asks))
        )
    finally:
        await other.close()
        await other_client.aclose()
    assert sum(t.granted for t in takes) == 25
    assert max(t.month_used for t in takes) == 25
    assert all(t.denied_by == REPLY for t, n in zip(takes, asks, strict=True) if t.granted < n)
    assert await redis_client.zcard(budgets.keys.platform_window(APP, REPLY, 60_000)) == 25
    assert await redis_client.zcard(budgets.keys.platform_window(APP, CHAT, 60_000)) == 25
    assert await budgets.month_usage(APP, MONTH) == MonthUsage(25, MONTH)


@pytest.fixture
async def other(redis_target: RedisTarget, prefix: str) -> AsyncIterator[PlatformBudgets]:
    """A second replica's budgets on the same Redis."""
    client = redis_target.client()
    store = SessionStore(client=client, keys=KeyBuilder(prefix=prefix))
    yield PlatformBudgets(store=store)
    await store.close()
    await client.aclose()


async def test_the_room_goes_first_to_the_replica_whose_calls_waited_longest(
    budgets: PlatformBudgets, other: PlatformBudgets, redis_client: aioredis.Redis
) -> None:
    reply = [(REPLY, [Window(1, 0.3)])]
    line = budgets.keys.platform_line(APP, REPLY)

    async def room() -> bool:  # the window's call has left (by Redis's clock)
        log = budgets.keys.platform_window(APP, REPLY, 300)
        return not await redis_client.zcount(log, "-inf", "+inf")

    assert (await take(budgets, reply)).granted == 1
    denied = await take(budgets, reply, line=Line(REPLY, 1000.0, slack=100, grace_s=5))
    assert denied.granted == 0 and await redis_client.hlen(line) == 1  # its place, kept
    await eventually(room, interval=0.02)
    # Within the slack of the waiting replica's rank: whoever asks first takes the room.
    assert (await take(other, reply, line=Line(REPLY, 1050.0, slack=100))).granted == 1
    await eventually(room, interval=0.02)
    # Past the slack: the other replica's calls asked later, so the room is the first one's.
    younger = await take(other, reply, line=Line(REPLY, 1200.0, slack=100))
    assert (younger.granted, younger.denied_by) == (0, REPLY) and younger.wait_s > 0
    assert (await take(budgets, reply, line=Line(REPLY, 1000.0, slack=100))).granted == 1
    assert await redis_client.hlen(line) == 1  # the first left the line (nothing more waits)
    assert 0 < await redis_client.pttl(line) <= 60_000


async def test_a_place_in_the_line_lapses_and_a_call_held_by_its_chat_keeps_none(
    budgets: PlatformBudgets, other: PlatformBudgets, redis_client: aioredis.Redis
) -> None:
    reply = [(REPLY, [Window(1, 0.2)])]
    line = budgets.keys.platform_line(APP, REPLY)
    assert (await take(budgets, reply)).granted == 1
    denied = await take(budgets, reply, line=Line(REPLY, 10.0, slack=0, grace_s=0.05))
    due = await redis_now(redis_client) + denied.wait_s + 0.05
    await eventually(lambda: _after(redis_client, due + 0.01), interval=0.02)
    # The first replica did not come back for its place: the room is anyone's.
    assert (await take(other, reply, line=Line(REPLY, 500.0))).granted == 1
    assert await redis_client.hlen(line) == 0
    # A call its chat holds back cannot use the API's room: it keeps no place.
    chat = [(REPLY, [Window(9, 1)]), (CHAT, [Window(1, 5)])]
    assert (await take(budgets, chat)).granted == 1
    held = await take(budgets, chat, line=Line(REPLY, 1.0, next=2.0))
    assert held.denied_by == CHAT and await redis_client.hlen(line) == 0
    with pytest.raises(ValueError):
        await take(budgets, reply, line=Line(REPLY, -1.0))


async def test_a_pause_of_the_app_denies_every_bucket_until_it_ends(
    budgets: PlatformBudgets,
) -> None:
    await budgets.pause(APP, None, 0.3)
    assert 0 < await budgets.paused_for(APP, None) <= 0.3
    denied = await take(budgets, [(CHAT, [Window(5, 1)])])
    assert (denied.granted, denied.denied_by, denied.month_used) == (0, "pause", 0)
    assert 0 < denied.wait_s <= 0.3
    assert (await take(budgets, [])).denied_by == "pause"
    await eventually(lambda: _granted(budgets, [(CHAT, [Window(5, 1)])]), interval=0.02)
    assert await budgets.paused_for(APP, None) == 0


async def test_a_pause_of_a_bucket_denies_only_takes_touching_it(budgets: PlatformBudgets) -> None:
    await budgets.pause(APP, REPLY, 30)
    assert 29 < await budgets.paused_for(APP, REPLY) <= 30
    assert await budgets.paused_for(APP, None) == 0
    assert await budgets.paused_for(APP, CHAT) == 0
    assert (await take(budgets, [(CHAT, [Window(5, 1)])])).granted == 1
    denied = await take(budgets, [(CHAT, [Window(5, 1)]), (REPLY, [Window(5, 1)])])
    assert (denied.granted, denied.denied_by) == (0, "pause") and 29 < denied.wait_s <= 30
    assert await budgets.month_usage(APP, MONTH) == MonthUsage(1, MONTH)  # nothing recorded


async def test_a_new_pause_extends_a_shorter_one_and_never_shortens(
    budgets: PlatformBudgets,
) -> None:
    await budgets.pause(APP, None, 30)
    await budgets.pause(APP, None, 5)
    assert 29 < await budgets.paused_for(APP, None) <= 30
    await budgets.pause(APP, None, 60)
    assert 59 < await budgets.paused_for(APP, None) <= 60
    await budgets.pause(APP, REPLY, 1)
    await budgets.pause(APP, REPLY, 0)  # nothing
    assert 0 < await budgets.paused_for(APP, REPLY) <= 1
    denied = await take(budgets, [(REPLY, [Window(5, 1)])])
    assert denied.denied_by == "pause" and 59 < denied.wait_s <= 60  # the longest pause touched


async def test_the_month_ledger_counts_caps_and_uncounts(budgets: PlatformBudgets) -> None:
    reply = [(REPLY, [Window(100, 60)])]
    assert await budgets.month_usage(APP, MONTH) == MonthUsage(0, MONTH)
    assert (await take(budgets, reply, 3, month_limit=5, month_left_s=86_400)).month_used == 3
    capped = await take(budgets, reply, 4, month_limit=5, month_left_s=86_400)
    assert capped == Take(2, 86_400.0, "month", 5)
    over = await take(budgets, reply, 1, month_limit=5, month_left_s=3600.5)
    assert over == Take(0, 3600.5, "month", 5)
    await budgets.uncount(APP, MONTH, 2)
    assert await budgets.month_usage(APP, MONTH) == MonthUsage(3, MONTH)
    assert (await take(budgets, reply, 1, month_limit=5, month_left_s=60)).granted == 1
    await budgets.uncount(APP, MONTH, 10)  # not below 0
    assert await budgets.month_usage(APP, MONTH) == MonthUsage(0, MONTH)
    await budgets.uncount(APP, "2027-01")  # a month without calls stays without a key
    assert await budgets.month_usage(APP, "2027-01") == MonthUsage(0, "2027-01")
    assert (await take(budgets, reply, month_limit=0, month_left_s=5)).denied_by == "month"
    # The windows logged every call granted, uncounted or not: they were made.
    assert (await take(budgets, [(REPLY, [Window(7, 60)])], 2)).granted == 1


async def test_every_key_has_a_ttl_and_an_apps_keys_share_one_slot(
    budgets: PlatformBudgets, redis_client: Any, prefix: str
) -> None:
    windows = [(REPLY, [Window(50, 1), Window(1000, 60)]), (CHAT, [Window(5, 1)])]
    await take(budgets, windows, 2)
    await budgets.pause(APP, CHAT, 10)
    await budgets.pause(APP, None, 5)
    k = budgets.keys
    expected = {
        k.platform_window(APP, REPLY, 1000): 1001,
        k.platform_window(APP, REPLY, 60_000): 60_001,
        k.platform_window(APP, CHAT, 1000): 1001,
        k.platform_month(APP, MONTH): LEDGER_TTL_MS,
        k.platform_pause(APP, CHAT): 10_000,
        k.platform_pause(APP, None): 5000,
    }
    found = [key async for key in redis_client.scan_iter(match=f"{prefix}:*")]
    assert sorted(found) == sorted(expected)
    for key, ttl in expected.items():
        assert 0 < await redis_client.pttl(key) <= ttl, key
    assert len({key_slot(key.encode()) for key in expected}) == 1
    if isinstance(redis_client, RedisCluster):
        slots = {await redis_client.cluster_keyslot(key) for key in expected}
        assert slots == {key_slot(next(iter(expected)).encode())}


async def test_wrong_lengths_and_empty_names_are_refused(budgets: PlatformBudgets) -> None:
    for seconds in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            Window(5, seconds)
    with pytest.raises(ValueError):
        await budgets.pause(APP, None, -1)
    with pytest.raises(ValueError):
        await budgets.pause(APP, "", 1)
    with pytest.raises(ValueError):
        await take(budgets, [(REPLY, [Window(5, 1)])], month_left_s=-1)
    with pytest.raises(ValueError):
        await budgets.take("", [], month=MONTH)
    with pytest.raises(ValueError):
        await budgets.take(APP, [("", [Window(1, 1)])], month=MONTH)
    with pytest.raises(ValueError):
        await budgets.uncount(APP, MONTH, -1)


async def _after(client: Any, at: float) -> bool:
    return await redis_now(client) >= at


async def _granted(budgets: PlatformBudgets, buckets: list[tuple[str, list[Window]]]) -> bool:
    return (await take(budgets, buckets)).granted == 1


async def _gone(client: Any, key: str) -> bool:
    return not await client.exists(key)
