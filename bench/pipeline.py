"""End-to-end pipeline benchmark: console POST -> intake -> turn -> first bot card over SSE.

Starts its own daemon (``python -m gateway run``) against a private redis-server on a free port
(or ``--redis-url``, under a unique key prefix), drives the console API open-loop at a target
rate and prints ONE JSON line:

  messages, conversations, duration_s, throughput_msg_s, first_card_ms {p50,p90,p99,max},
  own_card_messages, redis_commands_per_message, evalsha_per_message, binding_memory_bytes,
  baseline_healthz_ms {p50,p99}, p99_vs_healthz_ratio, turns, daemon_cpu_ms_per_turn,
  redis_round_trips_per_turn {gateway, console_timeline, ...}  (plus diagnostic keys)

``daemon_cpu_ms_per_turn``: the daemon's own CPU (/proc/<pid>/stat user + system, all threads)
from the first POST until every turn has finished, minus its idle rate (measured for
``--idle-seconds`` just before the load) times that window, divided by the turns finished in it
(``xgw_turns_total`` from /metrics; else the cards first seen in the window). It includes the
console's own work (its transcript writes, the SSE stream this bench reads).

``redis_round_trips_per_turn``: top-level Redis commands the daemon sent in the same window,
from MONITOR (``bench/redis_monitor.py`` says exactly what counts: each EVALSHA one, MULTI..EXEC
one, each command of a pipeline one), split into the gateway's own state and the console's
transcript (``timeline_put`` and transcript reads: the console's "platform" calls), per turn;
``gateway_net_of_idle`` leaves out the daemon's idle polling. ``script_writes_per_turn``: how
many writes the auto-pipeline needed for its script calls (from /metrics, when exposed).

The expert is echo with zero delays and the integration's summary window 0 unless
``--step-delay-ms`` / ``--char-delay-ms`` / ``--window-s`` say otherwise; ``--zero-delays``
insists on zero (the configuration of the CPU-per-turn figure).

Usage: python bench/pipeline.py [--conversations 50] [--messages 20] [--rate 200] [--zero-delays]
       [--duration-cap 60] [--idle-seconds 3] [--no-monitor] [--redis-url URL]

Everything goes to 127.0.0.1; every wait has a deadline; the daemon (and the private Redis) is
stopped and the prefix's keys deleted on the way out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import redis.asyncio as aioredis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from chaos_redis import StandaloneRedis  # noqa: E402
from guards import pipeline_guards  # noqa: E402
from redis_monitor import capturing, count, per_turn, script_names  # noqa: E402

INTEGRATION = "console"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
PROBE_NAME = "bench-probe"  # our connections' CLIENT SETNAME: their commands are left out


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def now() -> float:
    return time.perf_counter()


def percentile(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- the daemon --------------------------------------------------------------------------------
def write_config(
    path: Path,
    *,
    redis_url: str,
    prefix: str,
    port: int,
    data_dir: Path,
    expert: dict[str, Any] | None = None,
    integration: dict[str, Any] | None = None,
    runtime: dict[str, Any] | None = None,
    archive: dict[str, Any] | None = None,
) -> None:
    """The daemon's config: one console integration answered by the echo expert (zero delays,
    window 0, 100 ms card updates unless ``expert`` / ``integration`` / ``runtime`` override);
    ``archive``: the archive section (unset: the default, SQLite under ``dataDir``)."""
    config: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": port},
        "redis": {"url": redis_url, "keyPrefix": prefix, "connectTimeoutSeconds": 10},
        "dataDir": str(data_dir),
        "logging": {"level": "warning", "format": "json"},
        "runtime": {"shutdownGraceSeconds": 3, **(runtime or {})},
        "experts": [
            {
                "id": "echo",
                "kind": "echo",
                "stepDelayMs": 0,
                "charDelayMs": 0,
                "chunkChars": 10000,
                "stepTitles": ["Echo"],
                **(expert or {}),
            }
        ],
        "integrations": [
            {
                "id": INTEGRATION,
                "platform": "console",
                "xpertId": "echo",
                "summaryWindowSeconds": 0,
                "maxWindowSeconds": 0,
                "updateIntervalMs": 100,
                **(integration or {}),
            }
        ],
    }
    if archive is not None:
        config["archive"] = archive
    # JSON is YAML; no ${...} appears in it, so the loader's substitution leaves it alone.
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")


class Daemon:
    def __init__(
        self, config: Path, port: int, logfile: Path, cores: frozenset[int] | None = None
    ) -> None:
        self.config, self.port, self.logfile = config, port, logfile
        self.cores = cores  # pinned to these from its start (every thread)
        self.proc: subprocess.Popen[bytes] | None = None
        self.base = f"http://127.0.0.1:{port}"

    def start(self) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        cores = self.cores
        with self.logfile.open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gateway",
                    "run",
                    "--config",
                    str(self.config),
                    "--port",
                    str(self.port),
                ],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=(lambda: os.sched_setaffinity(0, set(cores))) if cores else None,
            )

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.logfile.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    async def wait_healthy(self, session: aiohttp.ClientSession, limit_s: float = 45) -> None:
        deadline = now() + limit_s
        while now() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"daemon exited with code {self.proc.returncode}:\n{self.log_tail()}"
                )
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                async with session.get(
                    f"{self.base}/healthz", timeout=aiohttp.ClientTimeout(total=2)
                ) as resp:
                    if resp.status == 200:
                        return
            await asyncio.sleep(0.1)
        raise RuntimeError(f"daemon not healthy within {limit_s:g} s:\n{self.log_tail()}")

    def stop(self, timeout: float = 20) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                log("daemon ignored SIGTERM; killing it")
                self.proc.kill()
                self.proc.wait(timeout=5)
        return self.proc.returncode

    def cpu_seconds(self) -> float | None:
        """User + system CPU the daemon has used so far (Linux /proc)."""
        if self.proc is None:
            return None
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return None

    def log_summary(self) -> dict[str, Any]:
        """Warnings and errors the daemon logged (JSON lines), by event, with the first one."""
        counts: dict[str, int] = {}
        first: str | None = None
        try:
            lines = self.logfile.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return {}
        for line in lines:
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                entry = {"level": "raw", "event": line[:120]}
            if not isinstance(entry, dict):
                continue
            key = f"{entry.get('level', '?')}: {entry.get('event', '?')}"
            counts[key] = counts.get(key, 0) + 1
            first = first or line[:400]
        return {"lines": len(lines), "by_event": counts, "first": first}


# --- the SSE stream ----------------------------------------------------------------------------
@dataclass
class Card:
    chat_id: str
    reply_to: str
    first_seen: float


@dataclass
class Stream:
    """Records from ``/console/api/events``: the first sighting of each card and user record."""

    cards: dict[str, Card] = field(default_factory=dict)  # card record id -> first sighting
    first_card_for: dict[str, float] = field(default_factory=dict)  # replyTo -> first card time
    user_seen: dict[str, float] = field(default_factory=dict)  # user record id -> time
    records: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    error: str | None = None

    def handle(self, data: str) -> None:
        t = now()
        change = json.loads(data)
        record = change.get("record") or {}
        self.records += 1
        if record.get("role") == "user":
            self.user_seen.setdefault(str(record.get("id")), t)
        elif record.get("role") == "bot" and record.get("type") == "card":
            rid, reply_to = str(record.get("id")), str(record.get("replyTo"))
            if rid not in self.cards:
                self.cards[rid] = Card(str(change.get("chatId")), reply_to, t)
                self.first_card_for.setdefault(reply_to, t)
        self.changed.set()

    async def run(self, resp: aiohttp.ClientResponse) -> None:
        event, data = "message", list[str]()
        try:
            async for raw in resp.content:
                line = raw.decode("utf-8").rstrip("\r\n")
                if not line:
                    if data and event == "record":
                        self.handle("\n".join(data))
                    event, data = "message", []
                elif line.startswith(":"):
                    continue
                else:
                    name, _, value = line.partition(":")
                    value = value.removeprefix(" ")
                    if name == "event":
                        event = value
                    elif name == "data":
                        data.append(value)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
        else:
            self.error = "SSE stream ended"
        finally:
            self.changed.set()

    async def wait_for(self, predicate: Any, deadline: float) -> bool:
        while not predicate():
            if self.error:
                raise RuntimeError(f"SSE stream failed: {self.error}")
            remaining = deadline - now()
            if remaining <= 0:
                return False
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(remaining, 0.5))
        return True


# --- Redis helpers -----------------------------------------------------------------------------
class RedisProbe:
    """Our own Redis client; counts the commands it issues so they can be left out."""

    def __init__(self, url: str, prefix: str) -> None:
        self.client: aioredis.Redis = aioredis.Redis.from_url(
            url,
            decode_responses=True,
            socket_timeout=10,
            socket_connect_timeout=5,
            client_name=PROBE_NAME,
        )
        self.prefix = prefix
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = (parts.port or 6379) if parts.scheme == "redis" else 0  # 0: a unix socket
        self.issued: dict[str, int] = {}  # by command, as commandstats names them

    def count(self, command: str) -> None:
        self.issued[command] = self.issued.get(command, 0) + 1

    async def commandstats(self) -> dict[str, int]:
        self.count("info")
        stats = await self.client.info("commandstats")
        out: dict[str, int] = {}
        for key, value in stats.items():
            name = key.removeprefix("cmdstat_")
            out[name] = int(value["calls"]) if isinstance(value, dict) else 0
        return out

    async def scan(self, pattern: str, limit_s: float = 20) -> list[str]:
        found: list[str] = []
        cursor = 0
        deadline = now() + limit_s
        while True:
            self.count("scan")
            cursor, keys = await self.client.scan(cursor=cursor, match=pattern, count=1000)
            found += [k if isinstance(k, str) else k.decode() for k in keys]
            if cursor == 0 or now() > deadline:
                return found

    async def pending_work(self) -> int:
        """Conversations still scheduled (the due index) plus live leases."""
        self.count("zcard")
        due = int(await self.client.zcard(f"{self.prefix}:due"))
        leases = await self.scan(f"{self.prefix}:*:lease", limit_s=5)
        return due + len(leases)

    async def own_addresses(self) -> set[str]:
        """Where our own connections come from (MONITOR names clients by address)."""
        self.count("client|list")
        clients = await self.client.client_list()
        return {str(c["addr"]) for c in clients if c.get("name") == PROBE_NAME}

    async def delete_prefix(self) -> int:
        keys = await self.scan(f"{self.prefix}:*", limit_s=30)
        for i in range(0, len(keys), 500):
            await self.client.unlink(*keys[i : i + 500])
        return len(keys)


def metric_sum(text: str | None, name: str) -> float | None:
    """The sum of every sample of ``name`` (all label sets) in Prometheus text, or None."""
    if text is None:
        return None
    found = None
    for line in text.splitlines():
        if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " "):
            found = (found or 0.0) + float(line.rsplit(" ", 1)[1])
    return found


def metric_delta(before: str | None, after: str | None, name: str) -> float | None:
    a, b = metric_sum(before, name), metric_sum(after, name)
    return None if a is None or b is None else b - a


def archive_section(choice: str) -> dict[str, Any] | None:
    if choice == "off":
        return {"enabled": False}
    return None if choice == "sqlite" else {"url": choice}


async def archive_drained(probe: RedisProbe, deadline: float) -> float | None:
    """Seconds until the daemon's archive outboxes (``<prefix>:audit:{<integration>}:outbox``,
    read in Redis: the metric is cached for a second) are empty, from now; None when they are
    not by ``deadline``."""
    start = now()
    while now() < deadline:
        waiting = 0
        for key in await probe.scan(f"{probe.prefix}:audit:*:outbox", limit_s=5):
            probe.count("xlen")
            waiting += int(await probe.client.xlen(key))
        if waiting == 0:
            return round(now() - start, 2)
        await asyncio.sleep(0.05)
    return None


def diff(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {
        k: after.get(k, 0) - before.get(k, 0)
        for k in after
        if after.get(k, 0) - before.get(k, 0) > 0
    }


# --- the load ----------------------------------------------------------------------------------
@dataclass
class Sent:
    conv: int
    seq: int
    chat_id: str
    scheduled: float
    started: float = 0.0
    acked: float = 0.0
    event_id: str | None = None
    status: str | None = None
    error: str | None = None


class Bench:
    def __init__(self, args: argparse.Namespace, base: str, http: aiohttp.ClientSession) -> None:
        self.args = args
        self.base = base
        self.http = http
        self.sent: list[Sent] = []

    async def post(self, chat_id: str, sender: str, text: str) -> tuple[int, dict[str, Any]]:
        body = {
            "integrationId": INTEGRATION,
            "chatId": chat_id,
            "chatType": "p2p",
            "senderId": sender,
            "senderName": f"Bench {sender}",
            "text": text,
            "mentionBot": False,
        }
        async with self.http.post(
            f"{self.base}/console/api/messages", json=body, timeout=aiohttp.ClientTimeout(total=15)
        ) as resp:
            data = await resp.json(content_type=None)
            return resp.status, data if isinstance(data, dict) else {}

    async def conversation(self, i: int, t0: float, cap_deadline: float) -> None:
        m, k, rate = self.args.conversations, self.args.messages, self.args.rate
        chat_id, sender = f"bench-{i}", f"u{i}"
        for j in range(k):
            # Global open-loop schedule: message number j*m+i goes out at t0 + n/rate.
            scheduled = t0 + (j * m + i) / rate
            if scheduled > cap_deadline:
                return
            delay = scheduled - now()
            if delay > 0:
                await asyncio.sleep(delay)
            item = Sent(conv=i, seq=j, chat_id=chat_id, scheduled=scheduled)
            self.sent.append(item)
            item.started = now()
            try:
                status, data = await self.post(chat_id, sender, f"message {j} of conversation {i}")
                item.acked = now()
                if status == 202 and data.get("eventId"):
                    item.event_id = str(data["eventId"])
                    item.status = str(data.get("status", ""))
                else:
                    item.error = f"HTTP {status}: {data}"
            except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
                item.acked = now()
                item.error = f"{type(exc).__name__}: {exc}"

    async def metrics(self) -> str | None:
        """The daemon's /metrics text (None when it cannot be read)."""
        try:
            async with self.http.get(
                f"{self.base}/metrics", timeout=aiohttp.ClientTimeout(total=10)
            ) as resp:
                return await resp.text() if resp.status == 200 else None
        except (aiohttp.ClientError, TimeoutError):
            return None

    async def healthz_baseline(self, n: int = 500) -> list[float]:
        url = f"{self.base}/healthz"
        timeout = aiohttp.ClientTimeout(total=5)
        for _ in range(20):  # warm the connection pool
            async with self.http.get(url, timeout=timeout) as resp:
                await resp.read()
        samples = []
        deadline = now() + 60
        for _ in range(n):
            if now() > deadline:
                break
            t = now()
            async with self.http.get(url, timeout=timeout) as resp:
                await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"/healthz answered {resp.status}")
            samples.append(now() - t)
        return samples


async def wait_quiet(probe: RedisProbe, deadline: float) -> bool:
    """Until no conversation of ours is scheduled or leased, twice in a row half a second apart.

    (Not "until Redis is quiet": a shared Redis may be busy with other clients.)
    """
    zeros = 0
    while now() < deadline:
        zeros = zeros + 1 if await probe.pending_work() == 0 else 0
        if zeros >= 2:
            return True
        await asyncio.sleep(0.5)
    log("work still pending at the deadline; counting what was seen")
    return False


async def monitor_sample(
    probe: RedisProbe, bench: Bench, stream: Stream, n: int = 5
) -> dict[str, Any] | None:
    """Where the Redis work of one message goes, from MONITOR while ``n`` messages go through
    one at a time (after the counted window, so MONITOR's own cost does not skew the load).

    Only commands naming our key prefix count (a shared Redis may serve others); the daemon's
    idle polling, measured first under MONITOR too, is subtracted.
    """
    names = script_names()
    seen: list[tuple[float, bool, str]] = []  # (server time, inside a script, command)
    chat_id = "bench-monitor"
    ready = asyncio.Event()
    marker = probe.prefix + ":"

    async def watch() -> None:
        async with probe.client.monitor() as mon:
            ready.set()
            async for cmd in mon.listen():
                command = str(cmd.get("command", ""))
                if marker in command:
                    seen.append((float(cmd["time"]), cmd.get("client_type") == "lua", command))

    windows: list[tuple[float, float]] = []  # POST start .. 202, wall clock
    task = asyncio.create_task(watch())
    try:
        await asyncio.wait_for(ready.wait(), 5)
        await asyncio.sleep(0.3)
        idle0 = time.time()
        await asyncio.sleep(1.5)
        idle1 = time.time()
        for j in range(n):
            t_a = time.time()
            status, data = await bench.post(chat_id, "umon", f"monitored message {j}")
            windows.append((t_a, time.time()))
            if status != 202:
                return None
            event_id = str(data["eventId"])
            if not await stream.wait_for(lambda e=event_id: e in stream.first_card_for, now() + 10):
                return None
            await asyncio.sleep(0.5)  # the turn's last card update and finish
        end = time.time()
        await asyncio.sleep(0.2)
    except (TimeoutError, RuntimeError, aiohttp.ClientError):
        return None
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task

    def count(t0: float, t1: float, lua: bool) -> int:
        return sum(1 for t, in_lua, _ in seen if t0 <= t < t1 and in_lua == lua)

    idle_s, busy_s = idle1 - idle0, end - windows[0][0]
    per_msg: dict[str, Any] = {
        "sample_messages": n,
        "idle_commands_per_s": round(
            (count(idle0, idle1, False) + count(idle0, idle1, True)) / idle_s, 1
        ),
    }
    for label, lua in (("round_trips", False), ("in_script_commands", True)):
        busy = count(windows[0][0], end, lua)
        idle = count(idle0, idle1, lua) / idle_s * busy_s
        per_msg[f"{label}_per_message"] = round(max(0.0, busy - idle) / n, 2)
    per_msg["intake_round_trips_per_message"] = round(
        sum(count(a, b, False) for a, b in windows) / n, 2
    )  # POST sent .. 202 received
    scripts: dict[str, int] = {}
    for t, in_lua, command in seen:
        words = command.split(" ", 2)
        if not in_lua and t >= windows[0][0] and words[0].upper() == "EVALSHA" and len(words) > 1:
            name = names.get(words[1].lower(), words[1][:12])
            scripts[name] = scripts.get(name, 0) + 1
    per_msg["evalsha_by_script_per_message"] = {
        k: round(v / n, 2) for k, v in sorted(scripts.items())
    }
    return per_msg


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="xgw-bench-") as tmp:
        tmpdir = Path(tmp)
        if args.redis_url:
            return await with_redis(args, args.redis_url, tmpdir)
        own = StandaloneRedis(tmpdir)
        await own.start()
        try:
            return await with_redis(args, own.url, tmpdir)
        finally:
            await own.stop()


async def with_redis(args: argparse.Namespace, redis_url: str, tmpdir: Path) -> dict[str, Any]:
    parts = urlsplit(redis_url)
    if parts.scheme not in ("redis", "unix") or (
        parts.scheme == "redis" and parts.hostname not in LOOPBACK
    ):
        raise SystemExit(f"refusing a Redis that is not on 127.0.0.1: {redis_url}")
    prefix = f"bench-{uuid.uuid4().hex[:10]}"
    port = free_port()
    result: dict[str, Any] = {}
    config = tmpdir / "gateway.yaml"
    write_config(
        config,
        redis_url=redis_url,
        prefix=prefix,
        port=port,
        data_dir=tmpdir / "data",
        expert=expert_options(args),
        integration={"summaryWindowSeconds": args.window_s, "maxWindowSeconds": args.window_s},
        archive=archive_section(args.archive),
    )
    daemon = Daemon(config, port, tmpdir / "daemon.log")
    probe = RedisProbe(redis_url, prefix)
    await probe.client.ping()
    connector = aiohttp.TCPConnector(limit=max(10, min(args.conversations, 100)), limit_per_host=0)
    sse_timeout = aiohttp.ClientTimeout(total=None, sock_connect=5)
    daemon.start()
    try:
        async with (
            aiohttp.ClientSession(connector=connector) as http,
            aiohttp.ClientSession(timeout=sse_timeout, read_bufsize=1 << 20) as sse,
        ):
            await daemon.wait_healthy(http)
            bench = Bench(args, daemon.base, http)
            result = await run_bench(args, bench, sse, probe, daemon, tmpdir)
            result["redis"] = "shared" if args.redis_url else "private"
            result["expert"] = {"kind": "echo", **expert_options(args)}
            result["summary_window_s"] = args.window_s
    finally:
        code = daemon.stop()
        if code not in (0, None):
            log(f"daemon exited with code {code}:\n{daemon.log_tail()}")
        if result:
            result["daemon_exit_code"] = code
            result["daemon_log"] = daemon.log_summary()
        if args.keep_daemon_log:
            log(f"daemon log:\n{daemon.log_tail(200)}")
        with contextlib.suppress(Exception):
            deleted = await probe.delete_prefix()
            log(f"deleted {deleted} keys under {prefix}:")
        await probe.client.aclose()
    return result


def expert_options(args: argparse.Namespace) -> dict[str, Any]:
    return {"stepDelayMs": args.step_delay_ms, "charDelayMs": args.char_delay_ms}


async def run_bench(
    args: argparse.Namespace,
    bench: Bench,
    sse: aiohttp.ClientSession,
    probe: RedisProbe,
    daemon: Daemon,
    tmpdir: Path,
) -> dict[str, Any]:
    # 1. Baseline on the idle daemon.
    healthz = await bench.healthz_baseline(500)
    # 2. One SSE connection for the whole run.
    resp = await sse.get(f"{bench.base}/console/api/events", params={"integrationId": INTEGRATION})
    if resp.status != 200:
        raise RuntimeError(f"SSE answered {resp.status}: {await resp.text()}")
    stream = Stream()
    task = asyncio.create_task(stream.run(resp))
    try:
        return await measure(args, bench, stream, probe, daemon, healthz, tmpdir)
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        resp.close()


async def measure(
    args: argparse.Namespace,
    bench: Bench,
    stream: Stream,
    probe: RedisProbe,
    daemon: Daemon,
    healthz: list[float],
    tmpdir: Path,
) -> dict[str, Any]:
    # 3. The SSE connection is proven live by a warm-up message whose card must come back.
    warm_deadline = now() + 20
    warm_ids: list[str] = []
    while now() < warm_deadline and not any(e in stream.first_card_for for e in warm_ids):
        # The server subscribes to Redis after sending the SSE preamble: repeat until seen.
        status, data = await bench.post("bench-warmup", "uwarm", f"warm-up {len(warm_ids)}")
        if status != 202:
            raise RuntimeError(f"warm-up message refused: {status} {data}")
        warm_ids.append(str(data["eventId"]))
        await stream.wait_for(
            lambda: any(e in stream.first_card_for for e in warm_ids),
            min(warm_deadline, now() + 1.0),
        )
    if not any(e in stream.first_card_for for e in warm_ids):
        raise RuntimeError(f"no card for the warm-up message within 20 s:\n{daemon.log_tail()}")

    # Unloaded latency: a few messages one at a time on the idle daemon, in a chat of their own.
    unloaded: list[float] = []
    for j in range(10):
        t = now()
        status, data = await bench.post("bench-unloaded", "uidle", f"unloaded {j}")
        event_id = str(data.get("eventId"))
        if status != 202 or not await stream.wait_for(
            lambda e=event_id: e in stream.first_card_for, now() + 10
        ):
            break
        unloaded.append(stream.first_card_for[event_id] - t)
        await asyncio.sleep(0.3)  # let the turn finish: the next message starts a fresh turn

    # 4. Idle: the daemon's own CPU and Redis traffic (its polling; other clients of a shared
    # Redis) for --idle-seconds, MONITOR already capturing.
    await wait_quiet(probe, now() + 15)
    monitor = (
        capturing(probe.host, probe.port, args.monitor_file or tmpdir / "monitor.raw")
        if args.monitor and probe.port
        else contextlib.nullcontext()
    )
    with monitor as capture:
        idle_before = await probe.commandstats()
        t_idle, wall_idle, cpu_idle = now(), time.time(), daemon.cpu_seconds()
        await asyncio.sleep(args.idle_seconds)
        idle_after = await probe.commandstats()
        idle_s, cpu_idle_end = now() - t_idle, daemon.cpu_seconds()
        wall_idle_end = time.time()
        idle_rate = max(0, sum(diff(idle_before, idle_after).values()) - 1) / idle_s
        idle_cpu_rate = (
            (cpu_idle_end - cpu_idle) / idle_s
            if cpu_idle is not None and cpu_idle_end is not None
            else None
        )
        metrics_before = await bench.metrics()

        # 5. The load, between two INFO commandstats snapshots; the window for CPU and round
        # trips runs from the first POST until every turn has finished.
        cpu_before, rusage_before = daemon.cpu_seconds(), resource.getrusage(resource.RUSAGE_SELF)
        issued_before = dict(probe.issued)
        stats_before = await probe.commandstats()
        t_stats, wall_window = now(), time.time()
        t0 = now() + 0.2
        cap_deadline = t0 + args.duration_cap
        await asyncio.gather(
            *(bench.conversation(i, t0, cap_deadline) for i in range(args.conversations))
        )
        sends_done = now()
        cpu_sends, rusage_after = daemon.cpu_seconds(), resource.getrusage(resource.RUSAGE_SELF)
        daemon_cpu = None if cpu_before is None or cpu_sends is None else cpu_sends - cpu_before
        client_cpu = (
            rusage_after.ru_utime
            + rusage_after.ru_stime
            - rusage_before.ru_utime
            - rusage_before.ru_stime
        )
        ok = [s for s in bench.sent if s.event_id]

        def all_rendered() -> bool:
            return all(s.event_id in stream.first_card_for for s in ok)

        # Merged messages never get a card of their own; stop waiting once cards stop coming.
        card_deadline = max(cap_deadline, sends_done + 5)
        last_count, last_change = -1, now()
        while now() < card_deadline and not all_rendered():
            await stream.wait_for(all_rendered, min(card_deadline, now() + 0.5))
            if len(stream.cards) != last_count:
                last_count, last_change = len(stream.cards), now()
            elif now() - last_change > 3 and await probe.pending_work() == 0:
                break

        quiet = await wait_quiet(probe, now() + 20)
        drained_s = await archive_drained(probe, now() + 60) if args.archive != "off" else None
        cpu_window_end, t_window_end, wall_window_end = daemon.cpu_seconds(), now(), time.time()
        stats_after = await probe.commandstats()
        stats_window = now() - t_stats
        metrics_after = await bench.metrics()
        ours_addrs = await probe.own_addresses()
    # Leave out our own commands in the window: all we issued since, except the last INFO
    # (a snapshot does not count itself).
    delta = diff(stats_before, stats_after)
    ours = diff(issued_before, probe.issued)
    ours["info"] = ours.get("info", 0) - 1
    for name, calls in ours.items():
        if name in delta:
            delta[name] = max(0, delta[name] - calls)
    delta = {k: v for k, v in delta.items() if v > 0}
    total_cmds = sum(delta.values())
    background = idle_rate * stats_window
    evalsha = delta.get("evalsha", 0) + delta.get("evalsha_ro", 0)

    # Turns finished in the window, and the daemon's CPU for each.
    window_s = t_window_end - t_stats
    cards_in_window = sum(1 for c in stream.cards.values() if t_stats <= c.first_seen)
    turns_metric = metric_delta(metrics_before, metrics_after, "xgw_turns_total")
    turns = int(turns_metric) if turns_metric is not None else cards_in_window
    cpu_per_turn: dict[str, Any] = {}
    if cpu_before is not None and cpu_window_end is not None and turns:
        gross = cpu_window_end - cpu_before
        net = gross - (idle_cpu_rate or 0.0) * window_s
        cpu_per_turn = {
            "daemon_cpu_ms_per_turn": round(net * 1000 / turns, 3),
            "daemon_cpu_ms_per_turn_gross": round(gross * 1000 / turns, 3),
            "daemon_idle_cpu_ms_per_s": round((idle_cpu_rate or 0.0) * 1000, 2),
            "daemon_cpu_window_s": round(window_s, 2),
        }
    script_writes = metric_delta(metrics_before, metrics_after, "xgw_redis_script_writes_total")
    script_calls = metric_delta(metrics_before, metrics_after, "xgw_redis_script_calls_total")
    round_trips: dict[str, Any] | None = None
    if capture is not None:
        tallies = count(
            capture.lines(),
            {"idle": (wall_idle, wall_idle_end), "load": (wall_window, wall_window_end)},
            ignore=ours_addrs | {capture.local_addr},
            marker=None if not args.redis_url else probe.prefix + ":",
        )
        round_trips = per_turn(tallies["load"], tallies["idle"], turns)
        round_trips["counted"] = (
            "top-level commands the daemon sent between the first POST and the last turn's "
            "end (MONITOR): EVALSHA 1, MULTI..EXEC 1, each pipelined command 1; console_timeline"
            ": timeline_put calls and transcript reads; gateway: all other commands; batches: "
            "runs of one connection's commands back to back within 50 us (one write, estimated "
            "from MONITOR's timing; at load one batch serves several turns)"
        )

    # 6. Where one message's Redis work goes: a short MONITOR sample after the counted window.
    sample = await monitor_sample(probe, bench, stream)

    # 7. An idle session binding's memory.
    binding_keys = await probe.scan(f"{probe.prefix}:*:binding")
    wanted = [k for k in binding_keys if "bench-0}" in k] or sorted(binding_keys)
    binding_key = wanted[0] if wanted else None
    binding_bytes = await probe.client.memory_usage(binding_key) if binding_key else None
    binding_type = await probe.client.type(binding_key) if binding_key else None

    # 8. Results.
    own = [
        stream.first_card_for[s.event_id] - s.started
        for s in ok
        if s.event_id in stream.first_card_for
    ]
    rendered_at = [
        stream.first_card_for[s.event_id] for s in ok if s.event_id in stream.first_card_for
    ]
    first_send = min((s.started for s in bench.sent), default=t0)
    end = max(rendered_at, default=sends_done)
    duration = max(end - first_send, 1e-9)
    # Messages without a card of their own were merged into a turn whose card answers another
    # message of the same chat sent at or after them.
    covered = 0
    by_chat: dict[str, list[Sent]] = {}
    for s in ok:
        by_chat.setdefault(s.chat_id, []).append(s)
    for items in by_chat.values():
        items.sort(key=lambda s: s.seq)
        for idx, s in enumerate(items):
            if s.event_id in stream.first_card_for:
                continue
            if any(later.event_id in stream.first_card_for for later in items[idx + 1 :]):
                covered += 1
    n_ok = len(ok)
    p99 = percentile(own, 99)
    hz_p50, hz_p99 = percentile(healthz, 50), percentile(healthz, 99)
    send_lag = [s.started - s.scheduled for s in bench.sent]
    post_rtt = [s.acked - s.started for s in ok]
    errors = [s.error for s in bench.sent if s.error]
    planned = args.conversations * args.messages
    result: dict[str, Any] = {
        "messages": n_ok,
        "conversations": args.conversations,
        "duration_s": round(duration, 3),
        "throughput_msg_s": round(len(own) / duration, 1),
        "first_card_ms": {
            "p50": ms(percentile(own, 50)),
            "p90": ms(percentile(own, 90)),
            "p99": ms(p99),
            "max": ms(max(own, default=None) if own else None),
        },
        "own_card_messages": len(own),
        "redis_commands_per_message": round(total_cmds / n_ok, 2) if n_ok else None,
        "evalsha_per_message": round(evalsha / n_ok, 2) if n_ok else None,
        "binding_memory_bytes": binding_bytes,
        "baseline_healthz_ms": {"p50": ms(hz_p50), "p99": ms(hz_p99)},
        "p99_vs_healthz_ratio": round(p99 / hz_p99, 1) if p99 and hz_p99 else None,
        "unloaded_first_card_ms": {
            "p50": ms(percentile(unloaded, 50)),
            "max": ms(max(unloaded, default=None) if unloaded else None),
        },
        # diagnostics
        "planned_messages": planned,
        "target_rate_msg_s": args.rate,
        "send_rate_msg_s": round(len(bench.sent) / max(sends_done - first_send, 1e-9), 1),
        "merged_messages": covered,
        "unrendered_messages": n_ok - len(own) - covered,
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "post_202_ms": {"p50": ms(percentile(post_rtt, 50)), "p99": ms(percentile(post_rtt, 99))},
        "send_lag_ms": {"p50": ms(percentile(send_lag, 50)), "max": ms(max(send_lag, default=0))},
        "redis_idle_commands_per_s": round(idle_rate, 1),
        "redis_idle_commands_per_s_ours": (sample or {}).get("idle_commands_per_s"),
        "settled": quiet,
        "daemon_cpu_s_during_sends": round(daemon_cpu, 2) if daemon_cpu is not None else None,
        "bench_client_cpu_s_during_sends": round(client_cpu, 2),
        "cpus": os.cpu_count(),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "loadavg_before": args.loadavg_before,
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "redis_commands_per_message_net_of_idle": (
            round(max(0.0, total_cmds - background) / n_ok, 2) if n_ok else None
        ),
        "redis_commands_by_type_per_message": (
            {
                k: round(v / n_ok, 2)
                for k, v in sorted(delta.items(), key=lambda kv: -kv[1])
                if v / n_ok >= 0.05
            }
            if n_ok
            else {}
        ),
        "monitor_sample": sample,
        "turns": turns,
        "turns_from": "xgw_turns_total" if turns_metric is not None else "cards",
        "cards_in_window": cards_in_window,
        **cpu_per_turn,
        "redis_round_trips_per_turn": round_trips,
        "script_writes_per_turn": (
            round(script_writes / turns, 2) if script_writes is not None and turns else None
        ),
        "script_calls_per_write": (
            round(script_calls / script_writes, 2) if script_calls and script_writes else None
        ),
        "archive": args.archive if "://" not in args.archive else urlsplit(args.archive).scheme,
        "archive_drained_after_s": drained_s,
        "binding_key_type": binding_type,
        "sse_records": stream.records,
    }
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conversations", type=int, default=50)
    parser.add_argument("--messages", type=int, default=20, help="messages per conversation")
    parser.add_argument("--rate", type=float, default=200, help="target messages per second")
    parser.add_argument(
        "--duration-cap",
        type=float,
        default=60,
        help="seconds: no message is scheduled later, no card awaited longer",
    )
    parser.add_argument(
        "--redis-url",
        default=None,
        help="use this Redis (127.0.0.1 only) instead of a private redis-server",
    )
    parser.add_argument("--step-delay-ms", type=int, default=0, help="echo expert stepDelayMs")
    parser.add_argument("--char-delay-ms", type=int, default=0, help="echo expert charDelayMs")
    parser.add_argument("--window-s", type=float, default=0, help="summaryWindowSeconds")
    parser.add_argument(
        "--zero-delays",
        action="store_true",
        help="echo stepDelayMs 0, charDelayMs 0, window 0 (the CPU-per-turn configuration)",
    )
    parser.add_argument(
        "--idle-seconds", type=float, default=3, help="the daemon's idle CPU, before the load"
    )
    parser.add_argument(
        "--no-monitor",
        dest="monitor",
        action="store_false",
        help="no MONITOR capture (no redis_round_trips_per_turn)",
    )
    parser.add_argument(
        "--monitor-file", type=Path, default=None, help="keep the raw MONITOR capture there"
    )
    parser.add_argument(
        "--keep-daemon-log", action="store_true", help="print the daemon's log to stderr at the end"
    )
    parser.add_argument(
        "--archive",
        default="sqlite",
        help="off, sqlite (the default: under the daemon's dataDir) or a postgresql:// URL; the "
        "CPU window then lasts until the archive's outbox is empty",
    )
    args = parser.parse_args(argv)
    if args.archive not in ("off", "sqlite") and not args.archive.startswith("postgresql://"):
        parser.error("--archive: off, sqlite or a postgresql:// URL")
    if args.conversations < 1 or args.messages < 1 or args.rate <= 0 or args.duration_cap <= 0:
        parser.error("--conversations, --messages, --rate and --duration-cap must be positive")
    if args.zero_delays:
        if args.step_delay_ms or args.char_delay_ms or args.window_s:
            parser.error("--zero-delays with a non-zero delay or window")
    args.loadavg_before = [round(x, 2) for x in os.getloadavg()]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        result = asyncio.run(main_async(args))
    except RuntimeError as exc:
        log(f"failed: {exc}")
        return 1
    except (aiohttp.ClientError, OSError, TimeoutError, aioredis.RedisError) as exc:
        log(f"failed: {type(exc).__name__}: {exc}")
        return 1
    trips = result.get("redis_round_trips_per_turn") or {}
    result["guards"] = pipeline_guards(
        round_trips_per_turn=trips.get("gateway"),
        first_card_p99_ms=(result.get("first_card_ms") or {}).get("p99"),
        rate=args.rate,
    )
    print(json.dumps(result, separators=(",", ":")), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
