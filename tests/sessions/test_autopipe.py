"""The intake auto-pipeline (sessions/autopipe.py) against a real Redis: batching, per-call
replies and errors, NOSCRIPT and connection-loss recovery, callers that give up, close; the
bytes a call is sent as."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.commands.core import AsyncScript
from redis.connection import Encoder, PythonRespSerializer
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from sessions import autopipe_links
from sessions.autopipe import ScriptPipe
from sessions.embedded import server_executable
from tests.support.redis_server import RedisServer
from tests.support.waits import eventually

# Appends ARGV[1] to KEYS[1] and answers it; 'boom' is answered with an error reply instead.
APPEND = """
if ARGV[1] == 'boom' then return redis.error_reply('boom') end
redis.call('RPUSH', KEYS[1], ARGV[1])
return {ARGV[1], tonumber(ARGV[2]) + 1}
"""


@pytest.fixture
async def pipe(redis_client: aioredis.Redis, prefix: str) -> AsyncIterator[ScriptPipe]:
    pipe = ScriptPipe(redis_client, name=f"{prefix}-scripts")
    yield pipe
    await pipe.close()


def script(client: aioredis.Redis, tag: str = "") -> AsyncScript:
    # A unique text (the comment) makes a script this Redis has never loaded: NOSCRIPT first.
    return client.register_script(f"-- {tag or uuid.uuid4().hex}\n{APPEND}")


async def pipe_connection_id(client: aioredis.Redis, name: str) -> int:
    clients = [c for c in await client.client_list() if c.get("name") == name]
    assert len(clients) == 1, clients
    return int(clients[0]["id"])


async def test_calls_made_together_share_one_write_and_keep_their_order(
    pipe: ScriptPipe, redis_client: aioredis.Redis, prefix: str
) -> None:
    s = script(redis_client)
    s.sha = await redis_client.script_load(s.script)
    key = f"{prefix}:list"
    replies = await asyncio.gather(*(pipe.evalsha(s, [key], [f"m{i}", i]) for i in range(50)))
    assert replies == [[f"m{i}", i + 1] for i in range(50)]
    assert await redis_client.lrange(key, 0, -1) == [f"m{i}" for i in range(50)]
    assert pipe.stats.calls == 50 and pipe.stats.writes == 1 and pipe.stats.largest_batch == 50


async def test_an_error_reply_reaches_only_its_caller(
    pipe: ScriptPipe, redis_client: aioredis.Redis, prefix: str
) -> None:
    s = script(redis_client)
    key = f"{prefix}:list"
    results = await asyncio.gather(
        pipe.evalsha(s, [key], ["a", 1]),
        pipe.evalsha(s, [key], ["boom", 1]),
        pipe.evalsha(s, [key], ["c", 1]),
        return_exceptions=True,
    )
    assert results[0] == ["a", 2] and results[2] == ["c", 2]
    assert isinstance(results[1], ResponseError) and "boom" in str(results[1])
    assert await redis_client.lrange(key, 0, -1) == ["a", "c"]


async def test_noscript_sends_the_calls_again_with_the_script_text(
    pipe: ScriptPipe, redis_client: aioredis.Redis, prefix: str
) -> None:
    s = script(redis_client)  # never loaded on this server
    key = f"{prefix}:list"
    replies = await asyncio.gather(*(pipe.evalsha(s, [key], [f"m{i}", 0]) for i in range(5)))
    assert [r[0] for r in replies] == [f"m{i}" for i in range(5)]
    assert await redis_client.lrange(key, 0, -1) == [f"m{i}" for i in range(5)]  # once each
    assert pipe.stats.script_reloads == 5  # each sent once more, as EVAL
    # The EVAL left the script on the server: the next call's EVALSHA is taken at once.
    assert (await pipe.evalsha(s, [key], ["m5", 0]))[0] == "m5"
    assert pipe.stats.script_reloads == 5


async def test_a_killed_connection_is_reopened_and_nothing_is_lost(
    pipe: ScriptPipe, redis_client: aioredis.Redis, prefix: str
) -> None:
    s = script(redis_client)
    key = f"{prefix}:list"
    assert await pipe.evalsha(s, [key], ["first", 0]) == ["first", 1]
    before = await pipe_connection_id(redis_client, pipe.name)
    await redis_client.client_kill_filter(_id=before)
    replies = await asyncio.gather(*(pipe.evalsha(s, [key], [f"m{i}", 0]) for i in range(3)))
    assert [r[0] for r in replies] == ["m0", "m1", "m2"]
    assert await redis_client.lrange(key, 0, -1) == ["first", "m0", "m1", "m2"]
    assert await pipe_connection_id(redis_client, pipe.name) != before  # named again
    assert pipe.stats.reconnects == 1


async def test_a_caller_that_gives_up_does_not_disturb_the_others(
    pipe: ScriptPipe, redis_client: aioredis.Redis, prefix: str
) -> None:
    s = script(redis_client)
    s.sha = await redis_client.script_load(s.script)
    key = f"{prefix}:list"
    gone = asyncio.ensure_future(pipe.evalsha(s, [key], ["gone", 0]))
    kept = asyncio.ensure_future(pipe.evalsha(s, [key], ["kept", 0]))
    await asyncio.sleep(0)  # both queued
    gone.cancel()
    assert await kept == ["kept", 1]
    assert await pipe.evalsha(s, [key], ["later", 0]) == ["later", 1]


async def test_after_close_calls_are_refused(
    pipe: ScriptPipe, redis_client: aioredis.Redis, prefix: str
) -> None:
    s = script(redis_client)
    assert await pipe.evalsha(s, [f"{prefix}:l"], ["x", 0]) == ["x", 1]
    await pipe.close()
    assert not [c for c in await redis_client.client_list() if c.get("name") == pipe.name]
    with pytest.raises(RedisConnectionError):
        await pipe.evalsha(s, [f"{prefix}:l"], ["y", 0])


@pytest.fixture
async def redis_without_client_command(tmp_path: Path) -> AsyncIterator[aioredis.Redis]:
    """A real Redis (the embedded binary) that refuses CLIENT, as some managed services do."""
    server = RedisServer(
        tmp_path,
        executable=server_executable(),
        extra=["--rename-command", "CLIENT", ""],
    )
    await asyncio.to_thread(server.start)
    try:
        client = aioredis.Redis(port=server.port, decode_responses=True)
        yield client
        await client.aclose()
    finally:
        await asyncio.to_thread(server.stop)


async def test_a_server_that_refuses_client_setname_still_takes_the_calls(
    redis_without_client_command: aioredis.Redis,
) -> None:
    client = redis_without_client_command
    pipe = ScriptPipe(client, name="xgw-scripts")
    s = script(client)
    try:
        replies = await asyncio.gather(*(pipe.evalsha(s, ["l"], [f"m{i}", 0]) for i in range(3)))
        assert [r[0] for r in replies] == ["m0", "m1", "m2"]
        # The server drops the idle connection; the pipe reconnects, still unnamed.
        await client.config_set("timeout", 1)

        async def dropped() -> bool:  # only the test's own connection is left
            return int((await client.info("clients"))["connected_clients"]) == 1

        await eventually(dropped, timeout=10)
        assert await pipe.evalsha(s, ["l"], ["after", 0]) == ["after", 1]
        assert await client.lrange("l", 0, -1) == ["m0", "m1", "m2", "after"]
        assert pipe.stats.reconnects == 1
    finally:
        await pipe.close()


@pytest.mark.parametrize("body", [False, True], ids=["evalsha", "eval"])
@pytest.mark.parametrize("packer", ["hiredis", "python"])
def test_a_call_is_packed_as_redis_py_packs_it(
    body: bool, packer: str, redis_client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    if packer == "python":  # what runs when hiredis refuses an argument

        def refuse(_: Any) -> bytes:
            raise TypeError("refused")

        monkeypatch.setattr(autopipe_links, "pack_command", refuse)
    s = script(redis_client)
    args = ["é-text", b"\x00bytes", 7, 1.5]
    call = autopipe_links.Call(s, ["k1", "k2"], args, asyncio.Future(), body=body)
    command, head = ("EVAL", s.script) if body else ("EVALSHA", s.sha)
    serializer = PythonRespSerializer(6000, Encoder("utf-8", "strict", False).encode)
    expected = b"".join(serializer.pack(command, head, 2, "k1", "k2", *args))
    assert autopipe_links.pack(call) == expected
