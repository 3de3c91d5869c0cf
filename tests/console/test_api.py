"""The console API's answers to bad input and to a Redis that is full or gone (docs/architecture.md,
invariant 6)."""

from __future__ import annotations

import asyncio
import io
import json
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis

from adapters.console import inbound
from sessions.connection import EmbeddedRedis
from tests.support.configs import base_config
from tests.support.console_browser import CONFIG, healthy
from tests.support.helpers import (
    ConsoleClient,
    Gateways,
    InProcessGateway,
    free_port,
    kill_named,
    named,
)
from tests.support.redis_server import RedisServer
from tests.support.redis_targets import REDIS_URL, STANDALONE, sweep
from tests.support.spawn import spawn_gateway
from tests.support.waits import eventually

VALID = {
    "integrationId": "console",
    "chatId": "dm-alice",
    "chatType": "p2p",
    "senderId": "alice",
    "text": "hi",
    "mentionBot": False,
}


@pytest.mark.parametrize(
    ("change", "status", "fragment"),
    [
        ({"chatType": "channel"}, 400, "chatType"),
        ({"text": ""}, 400, "text"),
        ({"senderId": None}, 400, "senderId"),
        ({"mentionBot": "yes please"}, 400, "mentionBot"),
        ({"chatId": "a b/c"}, 400, "chatId"),
        ({"extra": 1}, 400, "extra: unknown field"),
        ({"integrationId": "nope"}, 404, "integrationId"),
    ],
)
async def test_bad_messages_are_refused_with_the_field_named(
    console: ConsoleClient, change: dict[str, Any], status: int, fragment: str
) -> None:
    status_, body = await console.post("/console/api/messages", {**VALID, **change})
    assert status_ == status and fragment in body["error"]
    assert await console.messages() == []


async def test_malformed_and_oversized_bodies(console: ConsoleClient) -> None:
    async with console.http.post(
        console.base + "/console/api/messages",
        data=b"{not json",
        headers={"Content-Type": "application/json"},
    ) as resp:
        assert resp.status == 400 and "JSON" in (await resp.json())["error"]
    async with console.http.post(console.base + "/console/api/messages", json=[1, 2]) as resp:
        assert resp.status == 400
    big = json.dumps({**VALID, "text": "x" * 2_000_000}).encode()
    async with console.http.post(
        console.base + "/console/api/messages",
        data=io.BytesIO(big),
        headers={"Content-Type": "application/json"},
    ) as resp:
        assert resp.status == 413
    assert await console.messages() == []


async def test_actions_need_a_real_card_and_one_of_its_buttons(console: ConsoleClient) -> None:
    assert await console.click("dm-alice", "card-nope", "stop") == 404
    await console.send("hi")
    [card] = await console.wait_cards()
    assert await console.click("dm-alice", card["id"], "explode") == 400
    status, body = await console.post("/console/api/actions", {"integrationId": "console"})
    assert status == 400 and "chatId" in body["error"]


async def test_messages_listing_needs_the_integration(console: ConsoleClient) -> None:
    async with console.http.get(console.base + "/console/api/chats/dm-alice/messages") as resp:
        assert resp.status == 400
    async with console.http.get(
        console.base + "/console/api/chats/dm-alice/messages", params={"integrationId": "ghost"}
    ) as resp:
        assert resp.status == 404


async def test_events_stream_carries_timeline_changes(console: ConsoleClient) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.get(console.base + "/console/api/events", params={"integrationId": "console"}) as resp,
    ):
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        await resp.content.readline()
        event_id = await console.send("stream me")
        seen: list[str] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            line = (await resp.content.readline()).decode()
            if line.startswith("data: ") and '"status":"done"' in line:
                break
            seen.append(line)
        assert any(event_id in line for line in seen)


async def test_answers_are_compact_utf8_json(console: ConsoleClient) -> None:
    body = {**VALID, "text": "héllo ✓"}
    async with console.http.post(console.base + "/console/api/messages", json=body) as resp:
        assert resp.status == 202
        assert resp.headers["Content-Type"] == "application/json; charset=utf-8"
        raw = await resp.read()
    assert raw == b'{"eventId":"%s","status":"queued"}' % json.loads(raw)["eventId"].encode()
    path = "/console/api/chats/dm-alice/messages?integrationId=console"
    async with console.http.get(console.base + path) as resp:
        assert resp.headers["Content-Type"] == "application/json; charset=utf-8"
        raw = await resp.read()
    assert "héllo ✓".encode() in raw  # not \u-escaped
    assert json.loads(raw)["messages"][0]["text"] == "héllo ✓"


async def _record_line(resp: aiohttp.ClientResponse, text: str) -> str:
    """The stream's next ``data:`` line whose record has ``text``."""
    async with asyncio.timeout(10):
        while True:
            line = (await resp.content.readline()).decode()
            if line.startswith("data: ") and text in line:
                return line


async def test_an_event_stream_outlives_a_lost_redis_subscription(
    gateways: Gateways, redis_client: aioredis.Redis, prefix: str
) -> None:
    gateway: InProcessGateway = await gateways(base_config(prefix))
    name = f"{prefix}-events"
    gateway.gateway.store.pubsub.name = name  # the console subscribes on its first stream
    console = gateway.client

    async def subscribed() -> bool:
        return len(await named(redis_client, name)) == 1

    async with (
        aiohttp.ClientSession() as http,
        http.get(console.base + "/console/api/events", params={"integrationId": "console"}) as resp,
    ):
        await resp.content.readline()
        await eventually(subscribed)
        await console.send("before ✓")
        # the change as published: compact JSON, UTF-8 as it is (not \u-escaped)
        line = await _record_line(resp, "before ✓")
        change = json.loads(line.removeprefix("data: "))
        assert line == f"data: {json.dumps(change, ensure_ascii=False, separators=(',', ':'))}\n"
        assert await kill_named(redis_client, name) == 1
        await eventually(subscribed)  # subscribed again, the browser's stream left open
        await console.send("after ✓")
        assert "after ✓" in await _record_line(resp, "after ✓")


async def test_a_client_that_does_not_read_holds_up_no_other_stream(
    gateways: Gateways, prefix: str
) -> None:
    """Changes are written to each stream as its client takes them: one that stopped reading
    gets them later, all and in order, and meanwhile the others get theirs. (More than its
    socket buffers hold on either side, so the stuck client cannot have taken them.)"""
    gateway: InProcessGateway = await gateways(base_config(prefix))
    console = gateway.client
    count, text = 800, "x" * 16_000  # ~13 MB: half of them after the stuck client's buffers fill

    async def records(resp: aiohttp.ClientResponse, n: int) -> list[str]:
        ids: list[str] = []
        async with asyncio.timeout(60):
            while len(ids) < n:
                line = await resp.content.readline()
                if line.startswith(b"data: "):
                    record = json.loads(line[6:])["record"]
                    if record["id"].startswith("bulk-"):
                        ids.append(record["id"])
        return ids

    params = {"integrationId": "console", "chatId": "dm-bulk"}
    async with aiohttp.ClientSession() as http:
        reader = await http.get(console.base + "/console/api/events", params=params)
        stuck = await http.get(console.base + "/console/api/events", params=params)
        try:
            await reader.content.readline()
            await stuck.content.readline()
            await console.send("first", chat="dm-bulk", sender="bulk")
            await _record_line(reader, "first")
            await _record_line(stuck, "first")
            taking = asyncio.ensure_future(records(reader, count))
            wanted = [f"bulk-{i:04d}" for i in range(count)]
            for record_id in wanted:
                record = {"id": record_id, "role": "bot", "type": "text", "text": text}
                await gateway.gateway.timeline.put("console", "dm-bulk", record)
            assert await taking == wanted  # all of them, the stuck client not having read one
            assert await records(stuck, count) == wanted  # and it gets them all, in order
        finally:
            reader.close()
            stuck.close()


async def test_a_quiet_event_stream_gets_pings(
    gateways: Gateways, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inbound, "PING_SECONDS", 0.2)
    console = (await gateways(base_config(prefix))).client
    async with (
        aiohttp.ClientSession() as http,
        http.get(console.base + "/console/api/events", params={"integrationId": "console"}) as resp,
    ):
        lines = []
        async with asyncio.timeout(5):
            while len([x for x in lines if x == b": ping\n"]) < 2:
                lines.append(await resp.content.readline())
        assert lines[0] == b": connected\n"


@pytest.fixture
def private_redis() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A Redis of our own (the embedded binary) that the test may fill or kill."""
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(
            Path(tmp),
            executable=EmbeddedRedis.executable(),
            extra=["--maxmemory", "4mb", "--maxmemory-policy", "noeviction"],
        ).start()
        assert server.proc is not None
        try:
            yield server.url, server.proc
        finally:
            server.proc.kill()
            server.proc.wait()


async def test_full_redis_gets_503_and_nothing_is_stored(
    private_redis: tuple[str, subprocess.Popen[bytes]],
    make_gateway: Callable[..., Any],
    prefix: str,
    tmp_path: Path,
) -> None:
    url, _proc = private_redis
    config = base_config(prefix)
    config["redis"]["url"] = url
    console = await make_gateway(config)
    admin = aioredis.Redis.from_url(url, decode_responses=True)
    try:
        # Far over the limit with noeviction: every write is refused with an OOM error.
        await admin.config_set("maxmemory", 1)
        status, body = await console.post("/console/api/messages", VALID)
        assert status == 503 and "not stored" in body["error"]
        await admin.config_set("maxmemory", 0)
        assert await console.messages() == []
        assert [k async for k in admin.scan_iter(match=f"{prefix}:*burst*")] == []
        status, _ = await console.post("/console/api/messages", VALID)
        assert status == 202  # and it recovers once Redis has room again
    finally:
        await admin.aclose()


async def test_unreachable_redis_gets_503(
    private_redis: tuple[str, subprocess.Popen[bytes]],
    make_gateway: Callable[..., Any],
    prefix: str,
) -> None:
    url, proc = private_redis
    config = base_config(prefix)
    config["redis"]["url"] = url
    console = await make_gateway(config)
    proc.kill()
    proc.wait()
    status, _body = await console.post("/console/api/messages", VALID)
    assert status == 503
    async with console.http.get(console.base + "/readyz") as resp:
        assert resp.status == 503
    async with console.http.get(console.base + "/healthz") as resp:
        assert resp.status == 200


async def test_event_streams_share_one_redis_subscription(
    console: ConsoleClient, redis_client: aioredis.Redis, prefix: str
) -> None:
    from sessions import KeyBuilder

    # Sharded pub/sub (Redis >= 7): a channel per due shard, all on the one subscription.
    version = str((await redis_client.info("server"))["redis_version"])
    sharded = int(version.split(".")[0]) >= 7
    channels = KeyBuilder(prefix=prefix).timeline_channels(sharded)
    async with aiohttp.ClientSession() as http:
        streams = [
            await http.get(
                console.base + "/console/api/events", params={"integrationId": "console"}
            )
            for _ in range(3)
        ]
        try:
            for resp in streams:
                await resp.content.readline()

            async def subscribers() -> int:
                """Subscribers of each channel (each must have exactly the one)."""
                if sharded:
                    flat = await redis_client.execute_command("PUBSUB", "SHARDNUMSUB", *channels)
                    counts = {int(n) for n in flat[1::2]}
                else:
                    counts = {int(n) for _, n in await redis_client.pubsub_numsub(*channels)}
                return counts.pop() if len(counts) == 1 else -1

            await eventually(lambda: _equals(subscribers(), 1))
            await console.send("fan out")
            for resp in streams:  # every stream still gets every change
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    line = (await resp.content.readline()).decode()
                    if line.startswith("data: ") and "fan out" in line:
                        break
                else:
                    raise AssertionError("a stream missed the change")
        finally:
            for resp in streams:
                resp.close()


async def _equals(value: Any, expected: int) -> bool:
    return bool(await value == expected)


async def test_a_daemon_whose_console_streamed_stops_without_waiting_out_its_pump(
    tmp_path: Path,
) -> None:
    """At SIGTERM a replica closes its Redis pool before aiohttp ends the console's event
    pump, which subscribes again meanwhile; then the pump is cancelled, and must end. It did
    not when the cancel landed inside the re-subscribe's connect (redis-py took it there): each
    stop waited out the pump's 5 s bound (5.03 s here; sessions.pubsub now raises the cancel
    the connect swallowed, and the stop takes some 0.05 s)."""
    config = tmp_path / "gateway.yaml"
    prefix = "tz" + uuid.uuid4().hex[:8]
    config.write_text(CONFIG.format(redis=REDIS_URL, prefix=prefix, data=tmp_path / "data"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = spawn_gateway(
        *("run", "--config", str(config), "--port", str(port)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await eventually(lambda: asyncio.to_thread(healthy, url), timeout=30)
        async with (
            aiohttp.ClientSession() as http,
            http.get(url + "/console/api/events", params={"integrationId": "console"}) as resp,
        ):
            await resp.content.readline()  # the pump is subscribed once the stream answers
        loop = asyncio.get_running_loop()
        started = loop.time()
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 30) == 0
        assert loop.time() - started < 4, "the stop waited out the pump's 5 s bound"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sweep(STANDALONE, prefix)
