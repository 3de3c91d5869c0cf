"""Test helpers: a gateway in this process or in a subprocess (and the pool of a test's
gateways), a console API client."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import redis.asyncio as aioredis
import yaml
from aiohttp import web
from redis.asyncio.cluster import RedisCluster

from gateway.clock import now_ms
from gateway.config.file import load_settings
from gateway.config.settings import Settings
from gateway.runtime.app import Gateway
from gateway.runtime.cli import settings_model
from gateway.runtime.daemon import listen_sockets
from gateway.triggers.schedules import Scheduler
from tests.support.clock import FakeClock
from tests.support.redis_server import free_port
from tests.support.spawn import gateway_env, spawn_gateway

ROOT = Path(__file__).resolve().parents[2]


class ConsoleClient:
    """The console JSON API, as the browser page and other tools use it."""

    def __init__(self, base_url: str, integration_id: str = "console") -> None:
        self.base = base_url.rstrip("/")
        self.integration_id = integration_id
        self.http = aiohttp.ClientSession()
        self.idle_of: Callable[[], Awaitable[None]] | None = None  # an in-process gateway's

    async def close(self) -> None:
        await self.http.close()

    async def idle(self) -> None:
        """Wait until the in-process gateway behind this client has nothing under way."""
        assert self.idle_of is not None, "idle() needs an in-process gateway"
        await self.idle_of()

    async def post(self, path: str, body: Any) -> tuple[int, dict[str, Any]]:
        async with self.http.post(self.base + path, json=body) as resp:
            return resp.status, await resp.json(content_type=None)

    async def send(
        self,
        text: str,
        *,
        chat: str = "dm-alice",
        chat_type: str | None = None,
        sender: str = "alice",
        mention: bool = False,
        event_id: str | None = None,
        email: str | None = None,
    ) -> str:
        body: dict[str, Any] = {
            "integrationId": self.integration_id,
            "chatId": chat,
            "chatType": chat_type or ("p2p" if chat.startswith("dm-") else "group"),
            "senderId": sender,
            "text": text,
            "mentionBot": mention,
        }
        if event_id:
            body["eventId"] = event_id
        if email:
            body["senderEmail"] = email
        status, data = await self.post("/console/api/messages", body)
        assert status == 202, (status, data)
        return str(data["eventId"])

    async def click(self, chat: str, message_id: str, action_id: str, sender: str = "alice") -> int:
        status, _ = await self.post(
            "/console/api/actions",
            {
                "integrationId": self.integration_id,
                "chatId": chat,
                "messageId": message_id,
                "actionId": action_id,
                "senderId": sender,
            },
        )
        return status

    async def messages(self, chat: str = "dm-alice") -> list[dict[str, Any]]:
        url = f"{self.base}/console/api/chats/{chat}/messages"
        async with self.http.get(url, params={"integrationId": self.integration_id}) as resp:
            assert resp.status == 200
            data = await resp.json()
            records: list[dict[str, Any]] = data["messages"]
            return records

    async def cards(self, chat: str = "dm-alice") -> list[dict[str, Any]]:
        return [m for m in await self.messages(chat) if m.get("type") == "card"]

    async def texts(self, chat: str = "dm-alice") -> list[str]:
        return [m["text"] for m in await self.messages(chat) if m.get("type") == "text"]

    async def wait_cards(
        self,
        chat: str = "dm-alice",
        count: int = 1,
        status: str | None = "done",
        timeout: float = 15.0,
    ) -> list[dict[str, Any]]:
        """Poll until ``count`` cards exist and (optionally) all have ``status``."""
        deadline = time.monotonic() + timeout
        cards: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            cards = await self.cards(chat)
            if len(cards) >= count and (
                status is None or all(c["card"]["status"] == status for c in cards)
            ):
                return cards
            await asyncio.sleep(0.05)
        raise AssertionError(
            f"expected {count} cards with status {status}; got "
            f"{[(c['card']['status'], c['card']['answer']) for c in cards]}"
        )


def daemon_env(**extra: str) -> dict[str, str]:
    """The environment of a daemon or CLI subprocess: this one's without ``REDIS_URL`` (the
    tests' own Redis, which the CLI would use for a config naming no ``redis.url``), plus
    ``extra``."""
    return {**gateway_env(None), **extra}


def id_encoded(value: str) -> str:
    """The documented rule for an id in Redis keys and conversation ids (issue 25): ``%``, ``:``,
    ``|``, ``{`` and ``}`` percent-encoded (``%25 %3A %7C %7B %7D``), every other character kept -
    spelled out here, apart from the code the tests check."""
    return "".join(
        {"%": "%25", ":": "%3A", "|": "%7C", "{": "%7B", "}": "%7D"}.get(c, c) for c in value
    )


def raw_post(
    path: str,
    body: bytes,
    headers: dict[str, str] | None = None,
    *,
    extra: str = "",
    chunked: bool = False,
) -> bytes:
    """A POST as bytes: ``headers``, then the raw header lines ``extra``, then the body framed
    by ``Content-Length`` or, ``chunked``, in one chunk."""
    lines = [f"POST {path} HTTP/1.1", "Host: gw"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    if chunked:
        lines.append("Transfer-Encoding: chunked")
        payload = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    else:
        lines.append(f"Content-Length: {len(body)}")
        payload = body
    head = "\r\n".join(lines) + "\r\n" + extra
    return head.encode("utf-8") + b"\r\n" + payload


class RawConnection:
    """One keep-alive connection for bytes written as they are and answers read one by one."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> RawConnection:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def answer(self) -> tuple[int, dict[str, str], bytes]:
        """The next answer: status, headers (names lower-cased), body."""
        async with asyncio.timeout(10):
            status_line = await self.reader.readuntil(b"\r\n")
            headers: dict[str, str] = {}
            while (line := await self.reader.readuntil(b"\r\n")) != b"\r\n":
                name, _, value = line.decode().partition(":")
                headers[name.strip().lower()] = value.strip()
            body = await self.reader.readexactly(int(headers.get("content-length", "0")))
        return int(status_line.split()[1]), headers, body

    async def closed(self) -> bool:
        async with asyncio.timeout(10):
            return await self.reader.read() == b""

    def close(self) -> None:
        self.writer.close()


class InProcessGateway:
    """A real Gateway with a real HTTP server on a free port, in this event loop."""

    def __init__(self, config: dict[str, Any], *, clock: Callable[[], int] = now_ms) -> None:
        self.settings = load_settings(config, model=settings_model())
        self.gateway = Gateway(settings=self.settings, clock=clock)
        self.clock = clock
        self.port = free_port()
        self._runner: web.AppRunner | None = None
        self.client = ConsoleClient(f"http://127.0.0.1:{self.port}")
        self.client.idle_of = self.idle

    async def idle(self, timeout: float = 10.0) -> None:
        """Until nothing is under way in the gateway (``Gateway.idle``); fails after
        ``timeout``."""
        async with asyncio.timeout(timeout):
            await self.gateway.idle()

    async def start(self) -> None:
        await self.gateway.start()
        if isinstance(self.clock, FakeClock):  # moved by the test: look again at once
            self.clock.on_advance(self._clock_moved)
        self._runner = web.AppRunner(self.gateway.web_app(), handle_signals=False)
        await self._runner.setup()
        # The daemon's own site: aiohttp on a socket bound as the daemon binds it.
        (sock,) = listen_sockets("127.0.0.1", self.port)
        await web.SockSite(self._runner, sock).start()

    def _clock_moved(self) -> None:
        """The test moved the clock: what waits for a time (a fire, a window) looks again."""
        self.gateway.scheduler.wake()
        self.gateway.flusher.wake(self.gateway.clock())

    async def stop(self) -> None:
        await self.client.close()
        await self.gateway.shutdown()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()


class Gateways:
    """The in-process gateways of one test (the ``gateways`` fixture): ``await pool(config)``
    starts one, ``pool.append(gw)`` adopts one a platform helper started; ``stop_all`` stops
    them, newest first."""

    def __init__(self) -> None:
        self.started: list[InProcessGateway] = []

    async def __call__(
        self, config: dict[str, Any], *, clock: Callable[[], int] = now_ms
    ) -> InProcessGateway:
        gw = InProcessGateway(config, clock=clock)
        await gw.start()
        self.started.append(gw)
        return gw

    def append(self, gw: InProcessGateway) -> None:
        self.started.append(gw)

    def __iter__(self) -> Iterator[InProcessGateway]:
        return iter(self.started)

    def __len__(self) -> int:
        return len(self.started)

    async def idle(self, timeout: float = 10.0) -> None:
        """Until none of the test's gateways has anything under way."""
        for gw in self.started:
            await gw.idle(timeout)

    async def stop_all(self) -> None:
        for gw in reversed(self.started):
            await gw.stop()


class DaemonProcess:
    """``python -m gateway run`` in a subprocess, for multi-replica and crash tests."""

    def __init__(self, config: dict[str, Any], workdir: Path, name: str = "gw") -> None:
        self.port = free_port()
        self.config_path = workdir / f"{name}.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.log_path = workdir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.client = ConsoleClient(f"http://127.0.0.1:{self.port}")

    async def start(self, timeout: float = 20.0) -> None:
        """Until the daemon answers ``/healthz`` as itself (its own pid): a port that another
        worker's server took between ``free_port()`` and the bind answers too, for someone
        else; the daemon then fails to bind ("port … is in use") and starts again on a new
        port (three tries)."""
        for _ in range(3):
            if await self._start_once(timeout):
                return
            await self.client.close()
            self.port = free_port()
            self.client = ConsoleClient(f"http://127.0.0.1:{self.port}")
        raise RuntimeError(f"daemon found no free port: {self.log_path.read_text()[-2000:]}")

    async def _start_once(self, timeout: float) -> bool:
        """True once healthy; False where its port was taken (the daemon then exited)."""
        with self.log_path.open("wb") as log:
            self.proc = spawn_gateway(
                *("run", "--config", str(self.config_path), "--port", str(self.port)),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession() as http:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    output = self.log_path.read_text()
                    if f"port {self.port} is in use" in output:
                        return False
                    raise RuntimeError(f"daemon exited: {output[-2000:]}")
                with contextlib.suppress(aiohttp.ClientError, ValueError):
                    async with http.get(f"http://127.0.0.1:{self.port}/healthz") as resp:
                        if resp.status == 200 and (await resp.json()).get("pid") == self.proc.pid:
                            return True
                await asyncio.sleep(0.1)
        await self.stop()  # not left running past the test that gave up on it
        raise RuntimeError(f"daemon did not become healthy: {self.log_path.read_text()[-2000:]}")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    async def stop(self) -> None:
        await self.client.close()
        if self.proc is None:
            return
        self.kill(signal.SIGTERM)
        try:
            await asyncio.to_thread(self.proc.wait, 15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            await asyncio.to_thread(self.proc.wait, 5)


async def command_calls(client: aioredis.Redis) -> dict[str, int]:
    """Calls per command since the Redis server started (``INFO commandstats``); a script's own
    calls count too."""
    info = await client.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in info.items()}


async def named(client: Any, name: str) -> list[tuple[dict[str, Any], str]]:
    """The connections named ``name`` (CLIENT SETNAME; on every node of a cluster): where each
    is and its client id."""
    found = []
    nodes = client.get_nodes() if isinstance(client, RedisCluster) else [None]
    for node in nodes:
        where = {"target_nodes": node} if node is not None else {}
        for conn in await client.client_list(**where):
            if conn.get("name") == name:
                found.append((where, str(conn["id"])))
    return found


async def kill_named(client: Any, name: str) -> int:
    """CLIENT KILL every connection named ``name``, by id: nobody else's connection on the
    shared server is touched."""
    found = await named(client, name)
    for where, client_id in found:
        await client.client_kill_filter(_id=client_id, **where)
    return len(found)


def clocked_scheduler(
    gw: InProcessGateway, config: dict[str, Any] | Settings, clock: list[int]
) -> Scheduler:
    """A scheduler of ``gw``'s pipeline that reads ``config``'s schedules and fires on the test's
    clock (``clock[0]``, epoch ms): a test's fires without waiting for their real times."""
    settings = (
        config if isinstance(config, Settings) else load_settings(config, model=settings_model())
    )
    return Scheduler(
        store=gw.gateway.intake.schedules.book.store,
        settings=lambda: settings,
        ingest=gw.gateway.pipeline.ingest,
        adapters=gw.gateway.adapters,
        owner="test-replica",
        clock=lambda: clock[0],
    )


async def serve(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
