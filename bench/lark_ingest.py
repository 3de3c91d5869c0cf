"""Lark webhook ingest benchmark: signed, encrypted ``im.message.receive_v1`` POSTs.

Three servers, each its own process on 127.0.0.1, get the same pre-built payloads at rising
concurrency: the daemon (``python -m gateway run``: verify, decrypt, parse, dedup, store, ack),
a bare aiohttp handler answering ``{}``, and lark-oapi's ``EventDispatcherHandler`` (verify,
decrypt, parse, no storage) inside aiohttp. Turns are held back (a long summary window) so the
daemon's figure is intake alone. Prints ONE JSON line: events/s per server and concurrency, the
ratio to bare aiohttp, and p50/p99 ack latency.

Usage: python bench/lark_ingest.py [--events 3000] [--concurrency 1,16,64] [--rounds 3]
       python bench/lark_ingest.py --profile   (cProfile of the daemon's webhook path, in process)
       python bench/lark_ingest.py --py-spy [--concurrency 16]   (the daemon process under load,
           sampled by py-spy: its time by component and the top frames, as JSON)
       python bench/lark_ingest.py --workers 2 [--duration 10] [--connections 64] [--rounds 3]
           (1 and 2 worker processes under wrk, CPU per event from /proc: bench/lark_workers.py)
REDIS_URL defaults to redis://127.0.0.1:6379/0; the bench's keys are deleted on the way out.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import redis.asyncio as aioredis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fakes.lark import FakeLark  # noqa: E402
from tests.helpers import DaemonProcess, command_calls, free_port  # noqa: E402
from tests.lark_support import (  # noqa: E402
    ENCRYPT_KEY,
    INTEGRATION,
    TOKEN,
    bot_mention,
    lark_integration,
    message_event,
    sealed,
)

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def payloads(n: int) -> list[tuple[bytes, dict[str, str]]]:
    out = []
    for i in range(n):
        event = message_event(
            f"@_user_1 question {i}",
            chat_id=f"oc_bench{i % 200}",
            chat_type="group",
            message_id=f"om_{uuid.uuid4().hex[:16]}",
            mentions=[bot_mention()],
        )
        out.append(sealed(event))
    return out


# --- the two comparison servers (run as subprocesses of this script) -------------------------
def serve(kind: str, port: int) -> None:
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


async def wait_up(port: int, deadline_s: float = 20) -> None:
    deadline = time.monotonic() + deadline_s
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            with contextlib.suppress(aiohttp.ClientError):
                async with http.post(f"http://127.0.0.1:{port}/api/lark/webhook/x", data=b"{}"):
                    return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"server on {port} did not come up")


async def command_counts() -> dict[str, int]:
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        return await command_calls(client)
    finally:
        await client.aclose()


# --- load --------------------------------------------------------------------------------
async def drive(
    port: int, items: list[tuple[bytes, dict[str, str]]], concurrency: int
) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/api/lark/webhook/{INTEGRATION}"
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
        "statuses": statuses,
    }


@contextlib.asynccontextmanager
async def bench_config() -> AsyncIterator[dict[str, Any]]:
    """A daemon config for a fresh key prefix with turns held back (a long summary window), so
    the figure is intake alone; the fake Lark it talks to runs meanwhile, and the prefix's keys
    are deleted on the way out."""
    fake = FakeLark()
    await fake.start()
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    integ = lark_integration(fake, summaryWindowSeconds=600, maxWindowSeconds=600)
    try:
        yield {
            "redis": {"url": REDIS_URL, "keyPrefix": prefix},
            "logging": {"level": "warning", "format": "json"},
            "experts": [{"id": "echo", "kind": "echo"}],
            "integrations": [integ],
        }
    finally:
        await fake.stop()
        client = aioredis.Redis.from_url(REDIS_URL)
        async for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            await client.delete(key)
        await client.aclose()


async def run(events: int, levels: list[int], rounds: int) -> dict[str, Any]:
    async with bench_config() as config:
        results = await measure(config, events, levels, rounds)
    bare = results["servers"]["bare"]
    results["ratio_to_bare"] = {
        name: {c: round(r[c]["events_s"] / bare[c]["events_s"], 2) for c in r}
        for name, r in results["servers"].items()
    }
    return results


async def measure(
    config: dict[str, Any], events: int, levels: list[int], rounds: int
) -> dict[str, Any]:
    results: dict[str, Any] = {
        "events_per_round": events,
        "rounds": rounds,
        "levels": levels,
        "servers": {},
    }
    procs: list[asyncio.subprocess.Process] = []
    with tempfile.TemporaryDirectory() as tmp:
        daemon = DaemonProcess(config, Path(tmp), "lark-bench")
        try:
            await daemon.start()
            ports = {"daemon": daemon.port}
            for kind in ("bare", "lark_oapi"):
                port = free_port()
                cmd = [sys.executable, __file__, "--serve", kind, "--port", str(port)]
                procs.append(
                    await asyncio.create_subprocess_exec(
                        *cmd, cwd=ROOT, stdout=asyncio.subprocess.DEVNULL
                    )
                )
                await wait_up(port)
                ports[kind] = port
            stats_before = await command_counts()
            for port in ports.values():
                await drive(port, payloads(300), 8)  # warm-up
            # Rounds interleave the servers (rotating who goes first), so a machine that speeds
            # up or slows down mid-run moves every server alike; each figure is the median round.
            names = list(ports)
            runs: dict[str, dict[str, list[dict[str, Any]]]] = {n: {} for n in names}
            for c in levels:
                for r in range(rounds):
                    for name in names[r % len(names) :] + names[: r % len(names)]:
                        res = await drive(ports[name], payloads(events), c)
                        runs[name].setdefault(str(c), []).append(res)
                log(
                    f"concurrency {c}: "
                    + ", ".join(f"{n} {[x['events_s'] for x in runs[n][str(c)]]}" for n in names)
                )
            # Only the daemon talks to Redis here: its commands per event, read off the server.
            stats_after = await command_counts()
            sent = 300 + events * rounds * len(levels)
            delta = {k: stats_after.get(k, 0) - stats_before.get(k, 0) for k in stats_after}
            delta.pop("info", None)
            results["daemon_redis"] = {
                "events": sent,
                "evalsha_per_event": round(delta.get("evalsha", 0) / sent, 3),
                # Calls per command, the script's own calls included (Redis counts those too).
                "commands": {k: v for k, v in sorted(delta.items()) if v},
            }
            for name in names:
                results["servers"][name] = {
                    c: {
                        **sorted(rs, key=lambda x: x["events_s"])[len(rs) // 2],
                        "rounds_events_s": [x["events_s"] for x in rs],
                    }
                    for c, rs in runs[name].items()
                }
        finally:
            await daemon.stop()
            for proc in procs:
                proc.terminate()
                await asyncio.wait_for(proc.wait(), 10)
    return results


async def profile(events: int) -> None:
    """cProfile of the daemon's webhook path in this process (handler, verify, ingest)."""
    import cProfile
    import pstats

    from gateway.logging import configure_logging
    from tests.helpers import InProcessGateway

    configure_logging("warning", "json")
    async with bench_config() as config:
        gw = InProcessGateway(config)
        await gw.start()
        items = payloads(events)
        prof = cProfile.Profile()
        prof.enable()
        await drive(gw.port, items, 16)
        prof.disable()
        await gw.stop()
    pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(25)


# Where a sample's time is charged: the innermost frame of one of these, by its module path.
# (asyncio's own frames are skipped, so a socket write counts for whoever made it.)
COMPONENTS = [
    ("redis-py", "(redis/"),
    ("pydantic", "(pydantic"),
    ("crypto", "(cryptography/"),
    ("json", "(json/"),
    ("structlog", "(structlog/"),
    ("prometheus", "(prometheus_client/"),
    ("sessions/", "(sessions/"),
    ("adapters/lark/", "(adapters/lark/"),
    ("aiohttp", "(aiohttp/"),
    ("gateway/", "(gateway/"),
]


def charge(stack: list[str]) -> str:
    for frame in reversed(stack):
        for name, marker in COMPONENTS:
            if marker in frame:
                # The daemon's entry point sits under every loop callback: only the innermost
                # gateway/ frame that is not the entry point counts as gateway work.
                if name == "gateway/" and ("(gateway/__main__" in frame or "(gateway/cli" in frame):
                    return "event loop (uvloop)"
                return name
    return "other"


async def spy(exe: str, events: int, concurrency: int) -> dict[str, Any]:
    """The daemon under load, sampled by py-spy: its time by component, and the top frames."""
    async with bench_config() as config:
        with tempfile.TemporaryDirectory() as tmp:
            daemon = DaemonProcess(config, Path(tmp), "lark-spy")
            await daemon.start()
            try:
                assert daemon.proc is not None
                await drive(daemon.port, payloads(500), 8)  # warm-up
                raw = Path(tmp) / "samples.txt"
                recorder = await asyncio.create_subprocess_exec(
                    *(exe, "record", "--pid", str(daemon.proc.pid), "--rate", "250"),
                    *("--format", "raw", "--output", str(raw), "--nonblocking"),
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.PIPE,
                )
                await asyncio.sleep(1.0)
                load = await drive(daemon.port, payloads(events), concurrency)
                recorder.send_signal(signal.SIGINT)
                _out, err = await asyncio.wait_for(recorder.communicate(), 30)
                try:
                    text = await asyncio.to_thread(raw.read_text)
                except FileNotFoundError:
                    raise SystemExit(f"py-spy recorded nothing: {err.decode()[-500:]}") from None
            finally:
                await daemon.stop()
    return {"concurrency": concurrency, "load": load, **breakdown(text)}


def breakdown(text: str) -> dict[str, Any]:
    """py-spy's raw output (``frame;frame;… count`` lines) as shares by component."""
    shares: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    total = 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        total += int(count)
        shares[charge(frames)] += int(count)
        leaves[frames[-1]] += int(count)
    total = max(total, 1)
    return {
        "samples": total,
        "share": {k: round(v / total, 3) for k, v in shares.most_common()},
        "top_frames": [[f, round(n / total, 3)] for f, n in leaves.most_common(15)],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--serve", choices=["bare", "lark_oapi"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--py-spy", dest="py_spy", action="store_true")
    parser.add_argument("--workers", type=int, default=0, help="compare 1 and N workers (wrk)")
    parser.add_argument("--duration", type=float, default=10.0, help="--workers: s per round")
    parser.add_argument("--connections", type=int, default=64, help="--workers: wrk's -c")
    args = parser.parse_args()
    if args.workers:
        import lark_workers

        lark_workers.main(args.workers, args.duration, args.connections, args.rounds)
        return
    if args.serve:
        serve(args.serve, args.port)
        return
    if args.profile:
        asyncio.run(profile(args.events))
        return
    if args.py_spy:
        exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        if not Path(exe).exists():
            raise SystemExit("py-spy is not installed: pip install py-spy")
        level = 16 if "," in args.concurrency else int(args.concurrency)
        print(json.dumps(asyncio.run(spy(exe, args.events, level))))
        return
    levels = [int(c) for c in args.concurrency.split(",")]
    print(json.dumps(asyncio.run(run(args.events, levels, args.rounds))))


if __name__ == "__main__":
    main()
