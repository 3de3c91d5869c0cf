"""Many live turns on one replica: ``--turns`` echo turns streaming at once.

One daemon (``python -m gateway run``, a console integration with ``updateIntervalMs``
``--interval-ms``, window 0, ``runtime.maxConcurrentRuns`` at least ``--turns``) on a private
redis-server; the echo expert streams each reply (about ``--reply-chars`` characters,
``--chunk-chars`` at a time) with a character delay chosen so each turn runs about
``--turn-seconds``. The bench opens the console's event stream (SSE, ``/console/api/events``),
then posts ``--turns`` messages at once, each in its own chat (console API, at most
``--parallel`` POSTs in flight), and follows every card until it shows a final state.

Card-update lag, the figure of the issue: for every update of a card after its first one, its
arrival on the event stream minus (the previous update's ``updatedAt`` + the update interval).
The render loop writes a card at most once per interval, as soon as an interval has passed since
the previous write and there is something new; the echo streams a chunk more often than every
half interval (the bench refuses settings where it does not), so there is always something new
and an update should arrive one Redis write and one fan-out after its earliest allowed time. The
lag is how much later than that the viewer sees it. Its two parts are reported too:
``render_lag_ms`` (the gap between consecutive ``updatedAt`` minus the interval: the render loop
late) and ``delivery_ms`` (arrival minus ``updatedAt``: the write, the pub/sub fan-out, the SSE
stream and this client).

Missed final states: turns whose card, read back from the transcripts at the end
(``GET /console/api/chats/<chat>/messages``), does not show a final status. Peak RSS is the
daemon's VmHWM (/proc/<pid>/status); its CPU is user + system time over the window from the
first POST to the last final state.

Prints ONE JSON line. ``--turns 200`` is the smoke run (under a minute); the issue's figure is
``--turns 2000`` (p99 lag < 2 s, no missed final state, RSS < 300 MB).

Usage: python bench/concurrency.py [--turns 2000] [--turn-seconds 20] [--interval-ms 1000]
       [--parallel 64] [--no-pin] [--redis-url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import math
import os
import resource
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from chaos_redis import StandaloneRedis, redis_cpu_seconds
from pipeline import (
    INTEGRATION,
    Daemon,
    RedisProbe,
    Stream,
    free_port,
    log,
    write_config,
)
from procstat import Cores, loadavg, machine_busy_seconds, memory_mb, pin_threads

FINAL = frozenset({"done", "rejected", "error", "cancelled", "ended"})  # gateway/progress.py


def pct(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


def spread(values: list[float]) -> dict[str, Any]:
    r = {f"p{p}": pct(values, p) for p in (50, 90, 99)}
    r |= {"max": max(values, default=None), "count": len(values)}
    return {k: round(v, 1) if isinstance(v, float) else v for k, v in r.items()}


@dataclass
class Update:
    version: int
    updated_at: float  # the daemon's updatedAt, epoch ms
    arrived: float  # when this client read it, epoch ms
    status: str


@dataclass
class Cards(Stream):
    """The event stream, keeping every update of every card (by the message it answers)."""

    updates: dict[str, list[Update]] = field(default_factory=dict)  # replyTo -> updates

    def handle(self, data: str) -> None:
        arrived = time.time() * 1000
        change = json.loads(data)
        record = change.get("record") or {}
        self.records += 1
        if record.get("role") == "bot" and record.get("type") == "card":
            seen = self.updates.setdefault(str(record.get("replyTo")), [])
            version = int(record.get("version", 0))
            if not seen or version > seen[-1].version:
                status = str((record.get("card") or {}).get("status", ""))
                seen.append(Update(version, float(record.get("updatedAt", 0)), arrived, status))
        self.changed.set()

    def final(self, reply_to: str) -> bool:
        seen = self.updates.get(reply_to)
        return seen is not None and bool(seen) and seen[-1].status in FINAL


@dataclass
class Turn:
    chat: str
    posted: float = 0.0  # epoch ms
    event_id: str | None = None
    error: str | None = None


async def post_all(
    http: aiohttp.ClientSession, base: str, turns: list[Turn], text: str, parallel: int
) -> None:
    """Every turn's message, at most ``parallel`` POSTs in flight."""
    gate = asyncio.Semaphore(parallel)

    async def post(turn: Turn) -> None:
        body = {
            "integrationId": INTEGRATION,
            "chatId": turn.chat,
            "chatType": "p2p",
            "senderId": "u" + turn.chat,
            "text": text,
        }
        async with gate:
            turn.posted = time.time() * 1000
            try:
                async with http.post(f"{base}/console/api/messages", json=body) as resp:
                    data = await resp.json(content_type=None)
                    if resp.status == 202 and isinstance(data, dict):
                        turn.event_id = str(data["eventId"])
                    else:
                        turn.error = f"HTTP {resp.status}: {data}"
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                turn.error = f"{type(exc).__name__}: {exc}"

    await asyncio.gather(*(post(t) for t in turns))


async def transcripts_final(
    http: aiohttp.ClientSession, base: str, turns: list[Turn], parallel: int
) -> int:
    """How many turns' cards the transcripts show in a final state."""
    gate = asyncio.Semaphore(parallel)

    async def final(turn: Turn) -> bool:
        url = f"{base}/console/api/chats/{turn.chat}/messages"
        async with gate, http.get(url, params={"integrationId": INTEGRATION}) as resp:
            records = (await resp.json())["messages"] if resp.status == 200 else []
        return any(
            r.get("type") == "card"
            and r.get("replyTo") == turn.event_id
            and (r.get("card") or {}).get("status") in FINAL
            for r in records
        )

    return sum(await asyncio.gather(*(final(t) for t in turns if t.event_id)))


def lags(cards: Cards, interval_ms: float) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"update": [], "render": [], "delivery": []}
    for seen in cards.updates.values():
        for prev, cur in itertools.pairwise(seen):
            out["update"].append(cur.arrived - (prev.updated_at + interval_ms))
            out["render"].append(cur.updated_at - prev.updated_at - interval_ms)
        out["delivery"] += [u.arrived - u.updated_at for u in seen]
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    cores = Cores.plan(not args.no_pin)
    if cores.client is not None:
        os.sched_setaffinity(0, set(cores.client))  # this script: off the daemon's core
    before = loadavg()
    with tempfile.TemporaryDirectory(prefix="xgw-conc-") as tmp:
        workdir = Path(tmp)
        if args.redis_url:
            return await with_redis(args, args.redis_url, workdir, cores, before)
        redis = StandaloneRedis(workdir)
        await redis.start()
        try:
            if cores.client is not None and redis.proc is not None:
                pin_threads(redis.proc.pid, cores.client)
            return await with_redis(args, redis.url, workdir, cores, before)
        finally:
            await redis.stop()


async def with_redis(
    args: argparse.Namespace, redis_url: str, workdir: Path, cores: Cores, before: list[float]
) -> dict[str, Any]:
    text = ("turn " + "x" * args.reply_chars)[: max(1, args.reply_chars - 12)]
    reply_chars = len("You said:\n> ") + len(text)  # EchoExpert.reply_for
    char_delay_ms = max(1, round(args.turn_seconds * 1000 / reply_chars))
    chunk_ms = char_delay_ms * args.chunk_chars
    if chunk_ms * 2 > args.interval_ms:
        raise SystemExit(
            f"a chunk every {chunk_ms} ms: more than half of --interval-ms; the lag would "
            "measure the expert's pauses (use more --reply-chars or fewer --chunk-chars)"
        )
    expert = {"stepDelayMs": 0, "charDelayMs": char_delay_ms, "chunkChars": args.chunk_chars}
    port = free_port()
    config = workdir / "gateway.yaml"
    prefix = f"conc-{int(time.time())}"
    write_config(
        config,
        redis_url=redis_url,
        prefix=prefix,
        port=port,
        data_dir=workdir / "data",
        expert=expert,
        integration={"updateIntervalMs": args.interval_ms},
        runtime={"maxConcurrentRuns": max(200, args.turns + 10)},
    )
    daemon = Daemon(config, port, workdir / "daemon.log", cores.server)
    daemon.start()
    try:
        result = await measure(args, daemon, text, redis_url)
    finally:
        code = daemon.stop()
        if code not in (0, None):
            log(f"daemon exited with code {code}:\n{daemon.log_tail()}")
        if args.redis_url:  # a private Redis goes away with its data
            probe = RedisProbe(redis_url, prefix)
            with contextlib.suppress(Exception):
                log(f"deleted {await probe.delete_prefix()} keys under {prefix}:")
            await probe.client.aclose()
    result.update(
        config={
            "turns": args.turns,
            "update_interval_ms": args.interval_ms,
            "echo": expert,
            "reply_chars": reply_chars,
            "chunk_every_ms": chunk_ms,
            "parallel_posts": args.parallel,
        },
        daemon_exit_code=code,
        daemon_log=daemon.log_summary(),
        redis="private" if not args.redis_url else "shared",
        pinned=cores.describe(daemon="server", redis="client", bench="client"),
        loadavg_before=before,
        loadavg_after=loadavg(),
    )
    return result


async def measure(
    args: argparse.Namespace, daemon: Daemon, text: str, redis_url: str
) -> dict[str, Any]:
    timeout = aiohttp.ClientTimeout(total=60)
    connector = aiohttp.TCPConnector(limit=args.parallel)
    sse_timeout = aiohttp.ClientTimeout(total=None, sock_connect=5)
    async with (
        aiohttp.ClientSession(connector=connector, timeout=timeout) as http,
        aiohttp.ClientSession(timeout=sse_timeout, read_bufsize=1 << 22) as sse,
    ):
        await daemon.wait_healthy(http)
        resp = await sse.get(
            f"{daemon.base}/console/api/events", params={"integrationId": INTEGRATION}
        )
        cards = Cards()
        reader = asyncio.create_task(cards.run(resp))
        try:
            await warm_up(http, daemon.base, cards)
            redis0 = await redis_cpu_seconds(redis_url)
            result = await load(args, http, daemon, cards, text)
            redis_s = await redis_cpu_seconds(redis_url) - redis0
            window = float(result["window_s"])
            result["redis_cores"] = round(redis_s / window, 2)
            # Busy cores of the whole machine other than the daemon, Redis and this script:
            # well above 0, the figures measure the neighbours too.
            result["other_cores"] = round(max(0.0, result.pop("_others_s") - redis_s) / window, 2)
            return result
        finally:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
            resp.close()


async def warm_up(http: aiohttp.ClientSession, base: str, cards: Cards) -> None:
    """A message whose first card must come back: the stream is subscribed and live."""
    deadline = time.monotonic() + 20
    sent: list[Turn] = []
    while time.monotonic() < deadline:
        turn = Turn(chat="warmup")
        await post_all(http, base, [turn], "w", 1)
        sent.append(turn)
        if await cards.wait_for(
            lambda: any(t.event_id in cards.updates for t in sent), time.perf_counter() + 1
        ):
            return
    raise RuntimeError("no card for the warm-up message within 20 s")


async def load(
    args: argparse.Namespace,
    http: aiohttp.ClientSession,
    daemon: Daemon,
    cards: Cards,
    text: str,
) -> dict[str, Any]:
    assert daemon.proc is not None
    pid = daemon.proc.pid
    turns = [Turn(chat=f"c{i}") for i in range(args.turns)]
    rss_before = memory_mb(pid, "VmRSS")
    cpu0, busy0, t0 = daemon.cpu_seconds(), machine_busy_seconds(), time.monotonic()
    own0 = resource.getrusage(resource.RUSAGE_SELF)
    await post_all(http, daemon.base, turns, text, args.parallel)
    posting_s = time.monotonic() - t0
    posted = [t for t in turns if t.event_id]

    def all_final() -> bool:
        return all(cards.final(str(t.event_id)) for t in posted)

    limit = args.turn_seconds * 2 + 30 if args.deadline_s is None else args.deadline_s
    finished = await cards.wait_for(all_final, time.perf_counter() + limit)
    cpu1, busy1, window = daemon.cpu_seconds(), machine_busy_seconds(), time.monotonic() - t0
    own1 = resource.getrusage(resource.RUSAGE_SELF)
    rss_peak = memory_mb(pid, "VmHWM")
    final_in_transcripts = await transcripts_final(http, daemon.base, posted, args.parallel)
    daemon_cpu = (cpu1 or 0.0) - (cpu0 or 0.0)
    bench_cpu = own1.ru_utime + own1.ru_stime - own0.ru_utime - own0.ru_stime
    lag = lags(cards, args.interval_ms)
    per_card = [float(len(cards.updates.get(str(t.event_id), []))) for t in posted]
    first = [
        cards.updates[str(t.event_id)][0].arrived - t.posted
        for t in posted
        if cards.updates.get(str(t.event_id))
    ]
    lasting = [
        (seen[-1].arrived - seen[0].arrived) / 1000
        for t in posted
        if (seen := cards.updates.get(str(t.event_id))) and seen[-1].status in FINAL
    ]
    errors = [t.error for t in turns if t.error]
    return {
        "turns": args.turns,
        "posted": len(posted),
        "post_errors": len(errors),
        "first_post_error": errors[0] if errors else None,
        "all_final_on_stream": finished,
        "final_on_stream": sum(1 for t in posted if cards.final(str(t.event_id))),
        "missed_final_states": len(posted) - final_in_transcripts,
        "update_lag_ms": spread(lag["update"]),
        "render_lag_ms": spread(lag["render"]),
        "delivery_ms": spread(lag["delivery"]),
        "updates_per_card": {"min": min(per_card, default=0), "p50": pct(per_card, 50)},
        "first_card_ms": spread(first),
        "turn_s": spread(lasting),
        "posting_s": round(posting_s, 2),
        "window_s": round(window, 2),
        "daemon_rss_before_mb": rss_before,
        "daemon_rss_peak_mb": rss_peak,
        "daemon_cpu_s": round(daemon_cpu, 2),
        "daemon_cores": round(daemon_cpu / window, 2),
        "daemon_cpu_ms_per_turn": round(daemon_cpu * 1000 / max(len(posted), 1), 2),
        "bench_cores": round(bench_cpu / window, 2),
        "_others_s": max(0.0, busy1 - busy0 - daemon_cpu - bench_cpu),
        "sse_records": cards.records,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--turn-seconds", type=float, default=20, help="each turn streams so long")
    parser.add_argument("--interval-ms", type=int, default=1000, help="updateIntervalMs")
    parser.add_argument("--reply-chars", type=int, default=100, help="the echo reply's length")
    parser.add_argument("--chunk-chars", type=int, default=2, help="echo chunkChars")
    parser.add_argument("--parallel", type=int, default=64, help="POSTs in flight at most")
    parser.add_argument("--deadline-s", type=float, default=None, help="wait for final states")
    parser.add_argument("--no-pin", action="store_true", help="leave every process unpinned")
    parser.add_argument("--redis-url", default=None, help="default: a private redis-server")
    args = parser.parse_args(argv)
    if args.turns < 1 or args.turn_seconds <= 0 or args.parallel < 1:
        parser.error("--turns, --turn-seconds and --parallel must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        result = asyncio.run(run(args))
    except (RuntimeError, aiohttp.ClientError, OSError) as exc:
        log(f"failed: {type(exc).__name__}: {exc}")
        return 1
    print(json.dumps(result, separators=(",", ":")), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
