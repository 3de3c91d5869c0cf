"""Shared parts of the Lark webhook benches: the daemon's config (turns held back, so a figure is
intake alone), the servers compared with it (bare aiohttp, lark-oapi's dispatcher), the daemon
process, a private Redis, and the Python load client kept as a fallback and for profiling."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import redis.asyncio as aioredis
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from chaos_redis import StandaloneRedis  # noqa: E402
from procstat import child_pids, pin_threads, pin_to  # noqa: E402

from tests.fakes.lark import FakeLark  # noqa: E402
from tests.support.helpers import free_port  # noqa: E402
from tests.support.lark import (  # noqa: E402
    ENCRYPT_KEY,
    INTEGRATION,
    TOKEN,
    bot_mention,
    lark_integration,
    message_event,
    sealed,
)

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
WEBHOOK = "/api/lark/webhook/" + INTEGRATION


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


@contextlib.asynccontextmanager
async def bench_config(
    redis_url: str = REDIS_URL, *, answering: bool = False, fake: FakeLark | None = None
) -> AsyncIterator[dict[str, Any]]:
    """A daemon config for a fresh key prefix with turns held back (a long summary window), so
    the figure is intake alone; with ``answering``, each message's turn runs at once (the echo
    expert answering it in a card on the fake Lark, updated every ``updateIntervalMs`` of the
    integration's default), so turns run while ingest is measured. The
    fake Lark it talks to runs meanwhile (``fake``: one the caller started and stops, e.g. to
    tell it of the messages sent), and the prefix's keys are deleted on the way out."""
    own = fake is None
    if fake is None:
        fake = FakeLark()
        await fake.start()
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    windows = (
        {"summaryWindowSeconds": 0, "maxWindowSeconds": 5, "updateIntervalMs": None}
        if answering
        else {"summaryWindowSeconds": 600, "maxWindowSeconds": 3600}
    )
    integ = lark_integration(fake, **windows)
    try:
        yield {
            "redis": {"url": redis_url, "keyPrefix": prefix},
            "logging": {"level": "warning", "format": "json"},
            "experts": [{"id": "echo", "kind": "echo"}],
            "integrations": [integ],
        }
    finally:
        if own:
            await fake.stop()
        await delete_keys(redis_url, f"{prefix}:*")


async def delete_keys(redis_url: str, pattern: str) -> int:
    client = aioredis.Redis.from_url(redis_url)
    deleted = 0
    try:
        batch: list[bytes] = []
        async for key in client.scan_iter(match=pattern, count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                deleted += await client.unlink(*batch)
                batch = []
        if batch:
            deleted += await client.unlink(*batch)
    finally:
        await client.aclose()
    return deleted


@contextlib.asynccontextmanager
async def private_redis(workdir: Path, cores: frozenset[int] | None) -> AsyncIterator[str]:
    """A redis-server of our own on a free port (nothing else adds to its counts or its CPU),
    pinned with every thread to ``cores``; yields its URL."""
    server = StandaloneRedis(workdir)
    await server.start()
    try:
        if cores is not None and server.proc is not None:
            pin_threads(server.proc.pid, cores)
        yield server.url
    finally:
        await server.stop()


# --- the servers -----------------------------------------------------------------------------
DAEMONS = ("daemon", "floor")  # the servers that are the daemon (ready once /healthz is 200)


def daemon_argv(server: str, config_path: Path) -> list[str]:
    """``python -m gateway run --config …``; for ``floor``, the daemon with its Lark work free
    (``lark_floor.py``)."""
    floor = [str(Path(__file__).with_name("lark_floor.py"))]
    entry = floor if server == "floor" else ["-m", "gateway"]
    return [sys.executable, *entry, "run", "--config", str(config_path)]


class Server:
    """One server process on 127.0.0.1: the daemon (``python -m gateway run``; ``floor``: the
    daemon with its Lark work free, ``bench/lark_floor.py``), or this module's ``bare`` /
    ``lark_oapi`` handler; optionally pinned to ``cores`` from its start."""

    def __init__(
        self, name: str, argv: list[str], workdir: Path, cores: frozenset[int] | None = None
    ) -> None:
        self.name, self.argv, self.cores = name, argv, cores
        self.log_path = workdir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = int(argv[argv.index("--port") + 1])
        self.is_daemon = name in DAEMONS

    @classmethod
    def daemon(
        cls,
        config: dict[str, Any],
        workdir: Path,
        cores: frozenset[int] | None = None,
        *,
        floor: bool = False,
    ) -> Server:
        path = workdir / "daemon.yaml"
        path.write_text(yaml.safe_dump(config))
        name = "floor" if floor else "daemon"
        argv = [*daemon_argv(name, path), "--port", str(free_port())]
        return cls(name, argv, workdir, cores)

    @classmethod
    def handler(cls, kind: str, workdir: Path, cores: frozenset[int] | None = None) -> Server:
        argv = [sys.executable, str(Path(__file__).with_name("lark_ingest.py")), "--serve", kind]
        return cls(kind, [*argv, "--port", str(free_port())], workdir, cores)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{WEBHOOK}"

    def pids(self) -> list[int]:
        assert self.proc is not None
        return [self.proc.pid, *child_pids(self.proc.pid)]

    def spawn(self) -> subprocess.Popen[bytes]:
        with self.log_path.open("wb") as out:
            return subprocess.Popen(
                self.argv,
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=pin_to(self.cores),
            )

    async def start(self, limit_s: float = 60) -> None:
        self.proc = self.spawn()
        deadline = time.monotonic() + limit_s
        async with aiohttp.ClientSession() as http:
            while True:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    tail = self.log_path.read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"{self.name} did not start: {tail}")
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"http://127.0.0.1:{self.port}/healthz") as resp:
                        # The daemon once healthy; a comparison handler once it answers (404).
                        if resp.status == 200 or not self.is_daemon:
                            return
                await asyncio.sleep(0.1)

    async def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.proc.wait, 30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                await asyncio.to_thread(self.proc.wait, 5)


def serve(kind: str, port: int) -> None:
    """The comparison servers: ``bare`` answers ``{}``; ``lark_oapi`` runs lark-oapi's own
    ``EventDispatcherHandler`` (verify, decrypt, parse; a handler that stores nothing)."""
    from aiohttp import web

    if kind == "bare":

        async def handle(request: web.Request) -> web.Response:
            await request.read()
            return web.json_response({})

    else:
        import lark_oapi as lark
        from lark_oapi.core.model import RawRequest

        def on_message(data: Any) -> None:
            return None

        dispatcher = (
            lark.EventDispatcherHandler.builder(ENCRYPT_KEY, TOKEN)
            .register_p2_im_message_receive_v1(on_message)
            .build()
        )

        async def handle(request: web.Request) -> web.Response:
            raw = RawRequest()
            raw.uri = request.path
            raw.body = await request.read()
            raw.headers = dict(request.headers)
            resp = dispatcher.do(raw)
            return web.Response(status=resp.status_code, body=resp.content)

    app = web.Application()
    app.router.add_post("/api/lark/webhook/{integrationId}", handle)
    import uvloop

    uvloop.run(web._run_app(app, host="127.0.0.1", port=port, print=None))


# --- the Python client (fallback, profiling) -------------------------------------------------
def bench_event(i: int) -> dict[str, Any]:
    """The ``i``-th bench event: one of 200 group chats, the bot @-mentioned, its own message
    id."""
    return message_event(
        f"@_user_1 question {i}",
        chat_id=f"oc_bench{i % 200}",
        chat_type="group",
        message_id=f"om_{uuid.uuid4().hex[:16]}",
        mentions=[bot_mention()],
    )


def sealed_event(
    i: int, receive: Callable[[dict[str, Any]], None] | None = None
) -> tuple[bytes, dict[str, str]]:
    """The ``i``-th bench event sealed and signed as Lark sends it: body and headers.
    ``receive`` (a fake Lark's) is told of the event first: Lark knows every message it
    delivers, so a turn can reply to it and react to it."""
    event = bench_event(i)
    if receive is not None:
        receive(event)
    return sealed(event, nonce=uuid.uuid4().hex[:16])


def payloads(n: int) -> list[tuple[bytes, dict[str, str]]]:
    return [sealed_event(i) for i in range(n)]


async def drive(
    port: int, items: list[tuple[bytes, dict[str, str]]], concurrency: int
) -> dict[str, Any]:
    """POST ``items`` with ``concurrency`` aiohttp workers (one Python process: near 12,000
    requests/s the client, not the server, is the limit)."""
    url = f"http://127.0.0.1:{port}{WEBHOOK}"
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    queue = list(reversed(items))
    conn = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=conn) as http:

        async def worker() -> None:
            while queue:
                body, headers = queue.pop()
                t0 = time.perf_counter()
                async with http.post(url, data=body, headers=headers) as resp:
                    await resp.read()
                latencies.append((time.perf_counter() - t0) * 1000)
                statuses[resp.status] = statuses.get(resp.status, 0) + 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return {
        "events_s": round(len(items) / elapsed, 1),
        "p50_ms": round(percentile(latencies, 50), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
        "non_2xx": sum(n for s, n in statuses.items() if not 200 <= s < 300),
    }
