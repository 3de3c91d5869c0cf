"""MCP tool calls one replica serves (issue 41): a daemon (one process, console + echo expert,
an MCP client) on a real Redis, one turn to open a session in a chat, then ``--concurrency``
connections posting ``tools/call`` for ``--seconds`` each - every call authenticated,
counted against the client's calls per minute, checked against the chat's sessions, run under
the platform budget's priority, audited and counted, as a real client's. The requests are the
official ``mcp`` client's own (2026-07-28 era: one self-contained POST each), sent with aiohttp
so the client's CPU is not what is measured; one call first goes through the official client.

Prints JSON: per tool, calls/s, p50/p99 ms, errors, and the daemon's CPU ms per call.

Run:  .venv/bin/python bench/mcp_calls.py [--redis-url redis://127.0.0.1:6379/0]
      [--seconds 5] [--concurrency 16] [--tools chat_members,chat_send_message,chat_history]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pipeline import Daemon, free_port, percentile

TOKEN = "bench-mcp-token-0123456789"
VERSION = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
WHERE = {"integrationId": "console", "chatId": "dm-alice"}
ARGS = {
    "chat_members": WHERE,
    "chat_history": {**WHERE, "limit": 10},
    "chat_send_message": {**WHERE, "text": "bench **message**"},
}


def config(redis_url: str, prefix: str, port: int, data_dir: Path) -> dict[str, Any]:
    return {
        "server": {"host": "127.0.0.1", "port": port},
        "redis": {"url": redis_url, "keyPrefix": prefix},
        "dataDir": str(data_dir),
        "logging": {"level": "warning", "format": "json"},
        "archive": {"enabled": False},
        "experts": [{"id": "echo", "kind": "echo", "stepDelayMs": 0, "charDelayMs": 0}],
        "integrations": [
            {"id": "console", "platform": "console", "xpertId": "echo", "summaryWindowSeconds": 0}
        ],
        "mcp": {
            "clients": [{"id": "bench", "token": TOKEN, "experts": ["echo"]}],
            "callsPerMinute": 100_000,
        },
    }


async def open_session(http: aiohttp.ClientSession, base: str) -> None:
    body = {**WHERE, "chatType": "p2p", "senderId": "alice", "text": "hi", "mentionBot": False}
    async with http.post(f"{base}/console/api/messages", json=body) as resp:
        assert resp.status == 202, await resp.text()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        url = f"{base}/console/api/chats/dm-alice/messages?integrationId=console"
        async with http.get(url) as resp:
            cards = [m for m in (await resp.json())["messages"] if m.get("type") == "card"]
        if cards and cards[0]["card"]["status"] == "done":
            return
        await asyncio.sleep(0.05)
    raise RuntimeError("the turn that opens the session did not finish")


async def official(base: str) -> list[str]:
    """The tools as the official client lists them, and one call through it."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        async with Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            result = await client.call_tool("chat_members", WHERE)
            assert not result.is_error, result.content
    return names


async def load(base: str, tool: str, seconds: float, concurrency: int) -> dict[str, Any]:
    headers = {
        "Authorization": f"Bearer {TOKEN}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": VERSION,
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
    }
    latencies: list[float] = []
    errors = 0
    stop_at = time.monotonic() + seconds
    ids = iter(range(1, 10**9))

    async def worker(http: aiohttp.ClientSession) -> None:
        nonlocal errors
        while time.monotonic() < stop_at:
            params = {"name": tool, "arguments": ARGS[tool], "_meta": META}
            body = {"jsonrpc": "2.0", "id": next(ids), "method": "tools/call", "params": params}
            t0 = time.perf_counter()
            async with http.post(f"{base}/mcp", json=body, headers=headers) as resp:
                answer = await resp.json(content_type=None)
            latencies.append(time.perf_counter() - t0)
            if resp.status != 200 or answer.get("result", {}).get("isError", True):
                errors += 1

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as http:
        started = time.monotonic()
        await asyncio.gather(*(worker(http) for _ in range(concurrency)))
        elapsed = time.monotonic() - started
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    return {
        "tool": tool,
        "calls": len(latencies),
        "calls_per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": round(p50 * 1000, 2) if p50 is not None else None,
        "p99_ms": round(p99 * 1000, 2) if p99 is not None else None,
        "errors": errors,
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    prefix = f"bench-mcp-{uuid.uuid4().hex[:6]}"
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gw.json"
        path.write_text(json.dumps(config(args.redis_url, prefix, port, Path(tmp) / "data")))
        daemon = Daemon(path, port, Path(tmp) / "daemon.log")
        daemon.start()
        results = []
        try:
            async with aiohttp.ClientSession() as http:
                await daemon.wait_healthy(http)
                await open_session(http, daemon.base)
            tools = await official(daemon.base)
            for tool in args.tools.split(","):
                cpu0 = daemon.cpu_seconds()
                result = await load(daemon.base, tool, args.seconds, args.concurrency)
                cpu1 = daemon.cpu_seconds()
                if cpu0 is not None and cpu1 is not None and result["calls"]:
                    result["daemon_cpu_ms_per_call"] = round(
                        (cpu1 - cpu0) * 1000 / result["calls"], 3
                    )
                results.append(result)
        finally:
            daemon.stop()
    return {
        "bench": "mcp_calls",
        "replicas": 1,
        "concurrency": args.concurrency,
        "seconds": args.seconds,
        "cores": os.cpu_count(),
        "tools_listed": tools,
        "results": results,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--tools", default="chat_members,chat_history,chat_send_message")
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=2))
