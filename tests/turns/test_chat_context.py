"""A turn's context - the chat's memory, the session's variables, recent group messages - lives
on the chat's hash slot and is read in one script call; layout 2's keys move there once
(sessions/layout.py). On the shared Redis and on a cluster."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.crc import key_slot

from sessions import KeyBuilder, LayoutMismatch, SessionRecords
from sessions.autopipe import ScriptPipe
from sessions.layout import LAYOUT, ensure_layout, upgrade_layout_2
from tests.support.configs import base_config
from tests.support.helpers import ConsoleClient
from tests.support.redis_targets import BOTH_REDIS, RedisTarget
from tests.support.waits import eventually

pytestmark = BOTH_REDIS

TOKEN = "admin-secret-token"
DAY_MS = 24 * 3_600_000


def slot(key: str) -> int:
    return key_slot(key.encode())


async def test_a_turns_context_is_one_script_call_on_the_chats_slot(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    keys = KeyBuilder(prefix=prefix)
    records = SessionRecords(client=redis_client, keys=keys)
    # Every key of the chat's context is on the slot of its transcript.
    chat_slot = slot(keys.timeline_messages("console", "team"))
    assert {
        slot(keys.memory("console", "team")),
        slot(keys.session_variables("console", "team", "s1")),
        slot(keys.group_history("console", "team")),
    } == {chat_slot}
    await records.remember("console", "team", {"text": "Be brief"})
    await records.apply_variables(
        "console", "team", "s1", [("topic", "replace", "refunds"), ("n", "backend", 2)]
    )
    await records.apply_variables("console", "team", "s1", [("sys.language", "seen", "en")])
    await records.add_group_message(
        "console", "team", {"text": "lunch?", "at": 2000}, limit=5, window_ms=60_000
    )
    await records.add_group_message(
        "console", "team", {"text": "old", "at": 500}, limit=5, window_ms=60_000
    )
    pipe = ScriptPipe(redis_client, name=f"{prefix}-scripts")
    records.use_pipe(pipe)
    try:
        raw = await records.context_reads("console", "team", "s1", group_since_ms=None)
        # memory and variables: one call (sent again once after a NOSCRIPT, on a new server)
        assert pipe.stats.calls - pipe.stats.script_reloads == 1
        context = records.context_of(raw, group_since_ms=None)
        assert context.memory == [{"text": "Be brief"}]
        assert context.variables == {"topic": "refunds", "n": 2}
        assert context.backend == {"n": 2}
        assert dict(context.seen) == {"sys.language": "en"}
        assert context.group == []
        raw = await records.context_reads("console", "team", "s1", group_since_ms=1000)
        # with the group's recent messages: one call still
        assert pipe.stats.calls - pipe.stats.script_reloads == 2
        context = records.context_of(raw, group_since_ms=1000)
        assert context.group == [{"text": "lunch?", "at": 2000}]
        assert context.variables == {"topic": "refunds", "n": 2}
        # Another session of the chat has variables of its own; another chat, memory of its own.
        other = records.context_of(
            await records.context_reads("console", "other", "s2", group_since_ms=None),
            group_since_ms=None,
        )
        assert (other.memory, other.variables, dict(other.seen)) == ([], {}, {})
    finally:
        await pipe.close()


async def test_a_sessions_variables_are_read_by_its_records_chat(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    keys = KeyBuilder(prefix=prefix)
    records = SessionRecords(client=redis_client, keys=keys)
    await records.opened(
        "s1", {"integrationId": "console", "chatId": "team", "conversation": "c"}, at_ms=1
    )
    await records.apply_variables("console", "team", "s1", [("topic", "replace", "x")])
    assert await records.variables("s1") == {"var.topic": '"x"'}
    assert await records.variables("no-record") == {}  # no record, no chat: no variables


def config(prefix: str, **integration: Any) -> dict[str, Any]:
    cfg = base_config(prefix, **integration)
    cfg["admin"] = {"token": TOKEN}
    return cfg


async def admin(console: ConsoleClient, path: str, **params: str) -> Any:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with console.http.get(console.base + path, headers=headers, params=params) as resp:
        assert resp.status == 200
        return (await resp.json())["result"]


async def _has(console: ConsoleClient, chat: str, fragment: str) -> bool:
    return any(fragment in t for t in await console.texts(chat))


async def test_memory_and_variables_through_turns_and_the_admin_api(
    make_gateway: Callable[..., Any], prefix: str, redis_client: aioredis.Redis
) -> None:
    cfg = config(prefix, variables=[{"name": "topic", "type": "string", "default": "none"}])
    console = await make_gateway(cfg)
    await console.send("/remember Be brief", chat="team", mention=True)
    await eventually(lambda: _has(console, "team", "Remembered (item 1)"))
    await console.send("/remember Cite sources", chat="team", mention=True)
    await eventually(lambda: _has(console, "team", "Remembered (item 2)"))
    await console.send("/forget 1", chat="team", mention=True)
    await eventually(lambda: _has(console, "team", "Forgot: Be brief"))
    await console.send("hello [set topic=refunds]", chat="team", mention=True)
    await console.wait_cards(chat="team")
    await console.send("again", chat="team", mention=True)
    await console.wait_cards(chat="team", count=2)
    [session] = await admin(console, "/v1.0/sessions", integrationId="console", chatId="team")
    sid = session["sessionId"]
    values = {
        v["variable_key"]: v["variable_value"]
        for v in await admin(console, f"/v1.0/sessions/{sid}/variables")
    }
    assert values["var.topic"] == "refunds"
    assert values["memory.rules"] == "1. Cite sources"  # what the second turn saw
    memory = await admin(console, "/v1.0/chats/console/team/memory")
    assert [(m["index"], m["text"]) for m in memory] == [(1, "Cite sources")]
    keys = KeyBuilder(prefix=prefix)
    assert (
        await redis_client.exists(
            keys.memory("console", "team"), keys.session_variables("console", "team", sid)
        )
        == 2
    )
    await console.send("/memory", chat="team", mention=True)
    await eventually(lambda: _has(console, "team", "1. Cite sources"))


async def test_a_turn_reads_memory_and_variables_in_one_command(
    make_gateway: Callable[..., Any], prefix: str, redis_target: RedisTarget
) -> None:
    if redis_target.mode == "cluster":
        pytest.skip("MONITOR sees one node of a cluster")
    console = await make_gateway(config(prefix))
    await console.send("/remember Be brief", chat="team", mention=True)
    await eventually(lambda: _has(console, "team", "Remembered"))
    await console.send("first", chat="team", mention=True)
    await console.wait_cards(chat="team")
    keys = KeyBuilder(prefix=prefix)
    memory = keys.memory("console", "team")
    seen: list[str] = []
    monitor_client = aioredis.Redis.from_url(redis_target.url, decode_responses=True)
    try:
        async with monitor_client.monitor() as monitor:
            marker = f"{prefix}-end-of-turn"
            ended = asyncio.Event()

            async def listen() -> None:
                async for command in monitor.listen():
                    if marker in command["command"]:
                        ended.set()
                    # the client's commands, not those its scripts run
                    elif prefix in command["command"] and command["client_type"] != "lua":
                        seen.append(command["command"])

            listening = asyncio.create_task(listen())
            try:
                await console.send("second", chat="team", mention=True)
                await console.wait_cards(chat="team", count=2)
                await console.idle()
                # Redis feeds a monitor in the order it runs commands: once the marker is seen,
                # every command of the turn before it has been seen too.
                await monitor_client.echo(marker)
                await asyncio.wait_for(ended.wait(), 10)
            finally:
                listening.cancel()
    finally:
        await monitor_client.aclose()
    [session] = await admin(console, "/v1.0/sessions", integrationId="console", chatId="team")
    variables = keys.session_variables("console", "team", session["sessionId"])
    reads = [c for c in seen if memory in c]
    assert len(reads) == 1, seen  # the turn's one context read: the memory...
    assert variables in reads[0]  # ...and the session's variables


# --- the move from layout 2 ----------------------------------------------------------------
async def _write_layout_2(client: Any, prefix: str) -> None:
    await client.rpush(f"{prefix}:memory:console|team", json.dumps({"text": "Be brief"}))
    await client.pexpire(f"{prefix}:memory:console|team", 400 * DAY_MS)
    await client.rpush(f"{prefix}:group-history:console|team", json.dumps({"text": "hi"}))
    await client.pexpire(f"{prefix}:group-history:console|team", 600_000)
    await client.hset(f"{prefix}:session:s1:vars", mapping={"var.topic": '"refunds"'})
    await client.pexpire(f"{prefix}:session:s1:vars", 7 * DAY_MS)
    await client.hset(
        f"{prefix}:session:s1", mapping={"integrationId": "console", "chatId": "team"}
    )
    await client.hset(f"{prefix}:session:gone:vars", mapping={"var.topic": '"x"'})
    await client.pexpire(f"{prefix}:session:gone:vars", 60_000)


async def _check_layout_3(client: Any, prefix: str) -> None:
    keys = KeyBuilder(prefix=prefix)
    memory = keys.memory("console", "team")
    assert await client.lrange(memory, 0, -1) == [json.dumps({"text": "Be brief"})]
    assert 400 * DAY_MS - 60_000 < await client.pttl(memory) <= 400 * DAY_MS
    group = keys.group_history("console", "team")
    assert await client.lrange(group, 0, -1) == [json.dumps({"text": "hi"})]
    assert 540_000 < await client.pttl(group) <= 600_000
    variables = keys.session_variables("console", "team", "s1")
    assert await client.hgetall(variables) == {"var.topic": '"refunds"'}
    assert 7 * DAY_MS - 60_000 < await client.pttl(variables) <= 7 * DAY_MS
    for old in (
        f"{prefix}:memory:console|team",
        f"{prefix}:group-history:console|team",
        f"{prefix}:session:s1:vars",
        f"{prefix}:session:gone:vars",  # no record: dropped
    ):
        assert not await client.exists(old), old
    assert await client.hgetall(f"{prefix}:session:s1")  # the record stays where it is
    assert json.loads(await client.get(keys.layout())) == {"layout": 3, "dueShards": 16}


async def test_layout_2_keys_move_to_the_chats_slot_with_their_ttls(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    await _write_layout_2(redis_client, prefix)
    await redis_client.set(f"{prefix}:layout", json.dumps({"layout": 2, "dueShards": 16}))
    keys = KeyBuilder(prefix=prefix)
    # A key a new replica already wrote at its new name wins over the old one.
    await redis_client.rpush(keys.memory("console", "other"), "new")
    await redis_client.rpush(f"{prefix}:memory:console|other", "old")
    await ensure_layout(redis_client, keys)
    await _check_layout_3(redis_client, prefix)
    assert await redis_client.lrange(keys.memory("console", "other"), 0, -1) == ["new"]
    assert not await redis_client.exists(f"{prefix}:memory:console|other")
    assert await upgrade_layout_2(redis_client, keys) == 0  # nothing left to move
    await ensure_layout(redis_client, keys)  # layout 3 recorded: nothing to do


async def test_a_prefix_without_a_record_moves_layout_2_keys_too(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    await _write_layout_2(redis_client, prefix)
    await ensure_layout(redis_client, KeyBuilder(prefix=prefix))
    await _check_layout_3(redis_client, prefix)


async def test_two_replicas_starting_together_lose_nothing(
    redis_client: aioredis.Redis, prefix: str, redis_target: RedisTarget
) -> None:
    await redis_client.set(f"{prefix}:layout", json.dumps({"layout": 2, "dueShards": 16}))
    chats = [f"chat-{i}" for i in range(1200)]  # more than one batch each
    async with redis_client.pipeline(transaction=False) as pipe:
        for chat in chats:
            pipe.rpush(f"{prefix}:memory:console|{chat}", chat)
            pipe.pexpire(f"{prefix}:memory:console|{chat}", DAY_MS)
            pipe.hset(f"{prefix}:session:s-{chat}:vars", "var.chat", json.dumps(chat))
            pipe.hset(f"{prefix}:session:s-{chat}", mapping={"integrationId": "i", "chatId": chat})
        await pipe.execute()
    other = redis_target.client()
    try:
        keys = KeyBuilder(prefix=prefix)
        await asyncio.gather(ensure_layout(redis_client, keys), ensure_layout(other, keys))
    finally:
        await other.aclose()
    async with redis_client.pipeline(transaction=False) as pipe:
        for chat in chats:
            pipe.lrange(keys.memory("console", chat), 0, -1)
            pipe.hget(keys.session_variables("i", chat, f"s-{chat}"), "var.chat")
        found = await pipe.execute()
    assert found == [v for chat in chats for v in ([chat], json.dumps(chat))]
    assert [k async for k in redis_client.scan_iter(match=f"{prefix}:memory:*")] == []
    assert [k async for k in redis_client.scan_iter(match=f"{prefix}:session:*:vars")] == []


async def test_a_layout_this_version_does_not_know_is_refused(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    await redis_client.set(f"{prefix}:layout", json.dumps({"layout": LAYOUT + 1, "dueShards": 16}))
    with pytest.raises(LayoutMismatch, match=r"key layout 4, which this version \(layout 3\)"):
        await ensure_layout(redis_client, KeyBuilder(prefix=prefix))
    # A dueShards mismatch is named as such, whatever the layout.
    await redis_client.set(f"{prefix}:layout", json.dumps({"layout": 2, "dueShards": 8}))
    with pytest.raises(LayoutMismatch, match=r"dueShards is 16.*laid out for 8 due shards"):
        await ensure_layout(redis_client, KeyBuilder(prefix=prefix))
