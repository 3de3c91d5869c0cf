"""The chaos run's own Redis: a launcher per topology, pausing it, and exact INFO accounting.

``standalone`` starts a redis-server on a free port of 127.0.0.1 (never the shared one);
``cluster`` takes the 3-primary cluster of ``tests/support/cluster.py``. Both give the URL and
mode the replicas are configured with, the node addresses (INFO is read from every node and
summed), a pause of every node (SIGSTOP/SIGCONT of the processes, or ``CLIENT PAUSE ms ALL``),
and the gateway's audit rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import signal
import socket
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import redis.asyncio as aioredis


def redis_executable() -> str:
    from sessions.embedded import server_executable

    return server_executable()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisLauncher(Protocol):
    mode: str  # redis.mode of the replicas' config

    @property
    def url(self) -> str: ...

    @property
    def nodes(self) -> list[tuple[str, int]]: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def pause(self, seconds: float, how: str) -> None: ...

    def stats(self) -> Stats: ...

    async def audit_rows(self, prefix: str) -> list[dict[str, str]]: ...

    async def memory(self, prefix: str) -> dict[str, dict[str, int]]: ...


async def pause_processes(
    procs: list[subprocess.Popen[bytes]], nodes: list[tuple[str, int]], seconds: float, how: str
) -> None:
    """Every node unresponsive for ``seconds``: SIGSTOP (connections accepted by the kernel,
    nothing answered, the server's clock running on) or CLIENT PAUSE ALL (every client
    command waits)."""
    if how == "client":
        for host, port in nodes:
            client = aioredis.Redis(host=host, port=port)
            try:
                await client.client_pause(int(seconds * 1000), all=True)
            finally:
                await client.aclose()
        await asyncio.sleep(seconds)
        return
    try:
        for proc in procs:
            proc.send_signal(signal.SIGSTOP)
        await asyncio.sleep(seconds)
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGCONT)


class StandaloneRedis:
    """A redis-server of the run's own on a free port, data under ``workdir`` (no persistence:
    nothing restarts it)."""

    mode = "standalone"

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.dir = workdir / "redis"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def nodes(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", self.port)]

    def spawn(self) -> subprocess.Popen[bytes]:
        self.dir.mkdir(parents=True, exist_ok=True)
        return subprocess.Popen(
            [
                *(redis_executable(), "--port", str(self.port), "--bind", "127.0.0.1"),
                *("--dir", str(self.dir), "--save", "", "--appendonly", "no"),
                *("--logfile", str(self.dir / "redis.log"), "--daemonize", "no"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    async def start(self) -> None:
        self.proc = self.spawn()
        client = aioredis.Redis(port=self.port)
        deadline = time.monotonic() + 10
        try:
            while True:
                with contextlib.suppress(OSError, aioredis.RedisError):
                    if await client.ping():
                        return
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"own redis-server did not start on port {self.port}")
                await asyncio.sleep(0.05)
        finally:
            await client.aclose()

    async def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGCONT)  # a stopped process ignores SIGTERM
            self.proc.terminate()
            await asyncio.to_thread(self.proc.wait, 10)

    async def pause(self, seconds: float, how: str) -> None:
        assert self.proc is not None
        await pause_processes([self.proc], self.nodes, seconds, how)

    def stats(self) -> Stats:
        return Stats(self.nodes)

    async def audit_rows(self, prefix: str) -> list[dict[str, str]]:
        client = aioredis.Redis(port=self.port, decode_responses=True)
        try:
            return await audit_rows_of(client, prefix)
        finally:
            await client.aclose()

    async def memory(self, prefix: str) -> dict[str, dict[str, int]]:
        client = aioredis.Redis(port=self.port)
        try:
            return await memory_by_kind(client, prefix)
        finally:
            await client.aclose()


CONVERSATION_PARTS = frozenset({"burst", "burstmeta", "turn", "lease", "binding", "cancel"})


def key_kind(key: str, prefix: str) -> str:
    """What a key of ``prefix`` holds: ``xgw:{tag}:<conversation>:dedup:<event>`` -> ``dedup``,
    ``xgw:{tag}:tl:<chat>:msgs`` -> ``tl-msgs``, ``xgw:{tag}:vars:<id>`` -> ``vars``
    (conversation and chat ids may hold colons: the kind is read from the known ends)."""
    rest = key.removeprefix(prefix + ":")
    if rest.startswith("{") and "}" in rest:
        parts = rest.split("}", 1)[1].lstrip(":").split(":")
        if parts[0] == "tl":
            return "tl-" + parts[-1]
        if parts[0] in ("memory", "vars", "group-history"):  # a chat's context
            return parts[0]
        if parts[-1] in CONVERSATION_PARTS or parts == ["due"] or parts[-1] == "timeline":
            return parts[-1]
        return "dedup" if len(parts) > 2 and parts[-2] == "dedup" else "?" + parts[-1]
    parts = rest.split(":")
    return parts[0] + (":" + parts[-1] if parts[0] == "session" and len(parts) > 2 else "")


async def memory_by_kind(client: aioredis.Redis, prefix: str) -> dict[str, dict[str, int]]:
    """Keys of ``prefix`` by kind: how many, and their MEMORY USAGE in total."""
    out: dict[str, dict[str, int]] = {}
    async for raw in client.scan_iter(match=f"{prefix}:*", count=1000):
        key = raw.decode() if isinstance(raw, bytes) else str(raw)
        entry = out.setdefault(key_kind(key, prefix), {"keys": 0, "bytes": 0})
        entry["keys"] += 1
        entry["bytes"] += int(await client.memory_usage(key, samples=0) or 0)
    return out


def launcher(kind: str, workdir: Path) -> RedisLauncher:
    if kind == "standalone":
        return StandaloneRedis(workdir)
    try:
        module = importlib.import_module("bench.chaos_cluster")
    except ImportError as exc:
        raise SystemExit(f"--redis cluster needs tests/support/cluster.py: {exc}") from None
    cluster: RedisLauncher = module.ClusterRedis(workdir)
    return cluster


# --- INFO, counted exactly -----------------------------------------------------------------------
@dataclass
class Snapshot:
    at: float
    total: int  # total_commands_processed (a script's own calls included), less ours
    net_in: int  # total_net_input_bytes, less ours
    net_out: int  # total_net_output_bytes, less ours
    cpu_s: float = 0.0  # used_cpu_user + used_cpu_sys of every node (ours included: tiny)
    calls: Counter[str] = field(default_factory=Counter)  # INFO commandstats, INFO left out


@dataclass
class Rate:
    total: float
    net_in: float
    net_out: float
    cpu_s: float = 0.0


class Stats:
    """INFO of every node over raw sockets, so the bytes of our own requests and replies are
    known to the byte and left out (``INFO`` counts a request's input before it runs and its
    reply's output after)."""

    REQUEST = b"*4\r\n$4\r\nINFO\r\n$5\r\nstats\r\n$12\r\ncommandstats\r\n$3\r\ncpu\r\n"

    def __init__(self, nodes: list[tuple[str, int]]) -> None:
        self.nodes = nodes
        self.conns: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.own_in = self.own_out = self.own_calls = 0

    async def open(self) -> None:
        self.conns = [await asyncio.open_connection(h, p) for h, p in self.nodes]

    async def close(self) -> None:
        for _, writer in self.conns:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _info(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str:
        writer.write(self.REQUEST)
        await writer.drain()
        self.own_in += len(self.REQUEST)
        header = await asyncio.wait_for(reader.readline(), 30)
        if not header.startswith(b"$"):
            raise RuntimeError(f"INFO answered {header[:80]!r}")
        body = await reader.readexactly(int(header[1:]) + 2)
        return body.decode()

    async def snapshot(self) -> Snapshot:
        snap = Snapshot(at=time.monotonic(), total=0, net_in=0, net_out=0)
        own_out, own_calls = self.own_out, self.own_calls
        replies = 0
        for reader, writer in self.conns:
            text = await self._info(reader, writer)
            replies += len(text) + len(str(len(text) - 2)) + 3
            fields = dict(
                line.split(":", 1) for line in text.splitlines() if ":" in line and line[0] != "#"
            )
            snap.total += int(fields["total_commands_processed"])
            snap.net_in += int(fields["total_net_input_bytes"])
            snap.net_out += int(fields["total_net_output_bytes"])
            snap.cpu_s += float(fields["used_cpu_user"]) + float(fields["used_cpu_sys"])
            for key, value in fields.items():
                if key.startswith("cmdstat_") and key != "cmdstat_info":
                    calls = dict(p.split("=", 1) for p in value.split(","))
                    snap.calls[key.removeprefix("cmdstat_")] += int(calls["calls"])
        # Ours, as the servers counted them when they answered: our requests so far, our replies
        # and calls before this snapshot's.
        snap.total -= own_calls
        snap.net_in -= self.own_in
        snap.net_out -= own_out
        self.own_out += replies
        self.own_calls += len(self.conns)
        return snap

    async def idle_rate(self, seconds: float) -> Rate:
        a = await self.snapshot()
        await asyncio.sleep(seconds)
        b = await self.snapshot()
        dt = b.at - a.at
        return Rate(
            (b.total - a.total) / dt,
            (b.net_in - a.net_in) / dt,
            (b.net_out - a.net_out) / dt,
            (b.cpu_s - a.cpu_s) / dt,
        )

    async def wait_quiet(self, idle: Rate, deadline: float) -> bool:
        """Until two half-second windows in a row show no more commands than the idle rate
        (the replicas' polling) and a little; False at the deadline."""
        quiet = 0
        prev = await self.snapshot()
        while time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            cur = await self.snapshot()
            rate = (cur.total - prev.total) / (cur.at - prev.at)
            quiet = quiet + 1 if rate <= idle.total * 1.5 + 4 else 0
            if quiet >= 2:
                return True
            prev = cur
        return False

    @staticmethod
    def per_message(
        before: Snapshot,
        after: Snapshot,
        idle: Rate,
        window_s: float,
        messages: int,
        audit: dict[str, Any],
    ) -> dict[str, Any]:
        """Commands (a script's own calls included), network bytes and Redis CPU between two
        snapshots, in total and per accepted message, net of the idle polling over ``window_s``
        (the seconds Redis was serving)."""
        commands = after.total - before.total
        net_in, net_out = after.net_in - before.net_in, after.net_out - before.net_out
        net = {
            "commands": commands - idle.total * window_s,
            "in": net_in - idle.net_in * window_s,
            "out": net_out - idle.net_out * window_s,
            "cpu": after.cpu_s - before.cpu_s - idle.cpu_s * window_s,
        }
        calls = after.calls - before.calls
        turns = int(audit.get("turns") or 0)
        m = max(messages, 1)
        return {
            "window_s": round(window_s, 2),
            "commands": commands,
            "net_input_bytes": net_in,
            "net_output_bytes": net_out,
            "idle_per_s": {
                "commands": round(idle.total, 1),
                "in": round(idle.net_in),
                "out": round(idle.net_out),
                "redis_cpu_ms": round(idle.cpu_s * 1000, 2),
            },
            "redis_cpu_s": round(after.cpu_s - before.cpu_s, 3),
            "redis_cpu_ms_per_message": round(net["cpu"] * 1000 / m, 4),
            "commands_per_message": round(net["commands"] / m, 2),
            "evalsha_per_message": round(calls["evalsha"] / m, 2),
            "in_bytes_per_message": round(net["in"] / m),
            "out_bytes_per_message": round(net["out"] / m),
            "turns_per_message": round(turns / m, 3),
            "by_command_per_message": {
                k: round(v / m, 2) for k, v in calls.most_common() if v / m >= 0.05
            },
        }


async def dump_keys(nodes: list[tuple[str, int]], pattern: str) -> dict[str, Any]:
    """Every key matching ``pattern`` on every node with its type, TTL and content: what a
    conversation left behind when the run lost messages in it."""
    out: dict[str, Any] = {}
    for _host, port in nodes:
        client = aioredis.Redis(port=port, decode_responses=True)
        try:
            async for key in client.scan_iter(match=pattern, count=1000):
                kind = await client.type(key)
                value: Any
                if kind == "hash":
                    value = await client.hgetall(key)
                elif kind == "list":
                    value = await client.lrange(key, 0, -1)
                elif kind == "zset":
                    value = await client.zrange(key, 0, -1, withscores=True)
                elif kind == "string":
                    value = await client.get(key)
                else:
                    value = kind
                out[str(key)] = {"type": kind, "pttl": await client.pttl(key), "value": value}
        finally:
            await client.aclose()
    return out


async def audit_rows_of(client: Any, prefix: str) -> list[dict[str, str]]:
    """Every audit row under ``prefix``: the turn rows of the bench's integration's stream and,
    from older versions, of the global one (``client``: a server's or a cluster's)."""
    from bench.chaos_replica import INTEGRATION
    from sessions import KeyBuilder

    keys = KeyBuilder(prefix=prefix)
    rows: list[tuple[str, dict[str, str]]] = []
    for stream in (keys.audit(), keys.audit_events(INTEGRATION)):
        rows += await client.xrange(stream, count=1_000_000) or []
    return [{str(k): str(v) for k, v in (fields or {}).items()} for _id, fields in rows]


async def redis_cpu_seconds(url: str) -> float:
    """The whole Redis server's CPU so far (``INFO cpu``)."""
    client = aioredis.Redis.from_url(url)
    try:
        info = await client.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    finally:
        await client.aclose()
