"""Lark webhook ingest benchmark: signed, encrypted ``im.message.receive_v1`` POSTs, with wrk.

Three servers, each its own process on 127.0.0.1, get the same signed, encrypted webhooks from
wrk (C, one thread, ``--connections`` keep-alive connections; ``lark_wrk.lua`` cycles through a
pre-built file of payloads, each its own event with its own message id, nonce and signature):

- ``daemon``: ``python -m gateway run`` (verify, decrypt, parse, dedup, store durably, ack), with
  turns held back (a long summary window) so the figure is intake alone, on a private
  redis-server (nothing else adds to its counts or competes for it);
- ``bare``: an aiohttp handler answering ``{}``;
- ``lark_oapi``: lark-oapi's ``EventDispatcherHandler`` inside aiohttp (verify, decrypt, parse,
  store nothing);
- with ``--floor``, a fourth: ``floor``, the daemon with its Lark work free (``lark_floor.py``:
  no signature, decryption, JSON parse or Envelope construction; the rest as in ``daemon``), on
  the same private Redis under the same key prefix. Its ratio to ``bare`` is the most the
  daemon could reach if that work cost nothing.

Rounds interleave the servers (daemon, bare, lark_oapi, daemon, …), each ``--duration`` s, so a
machine that speeds up or slows down moves all three alike; each round writes a fresh payload
file (new event ids: the daemon's dedup never short-circuits; fresh timestamps: its replay
window accepts them), large enough that the daemon and lark-oapi never wrap (``wraps`` says if
one did; the bare handler, which reads nothing, may). The servers are pinned to the first core,
wrk, the private Redis and this script to the second (``pinned`` in the JSON; nothing is pinned
on one core or with ``--no-pin``). The daemon's CPU per event comes from /proc (user + system of
its process over the run / events answered).

Prints ONE JSON line: per server the median round and every round's events/s, latency
(p50/p90/p99/p99.9 from wrk's own histogram) and CPU per event; the ratios daemon/bare and
daemon/lark_oapi (of the medians, and per round); the daemon's Redis commands per event; the
load average before and after. Without wrk (and no way to install it) the Python client runs
instead, labelled ``"client": "python (client-bound)"``: one Python process is itself the limit
near 12,000 requests/s and flatters every ratio.

Usage: python bench/lark_ingest.py [--duration 10] [--connections 32] [--rounds 5] [--no-pin]
       [--floor] [--answering]   (--answering: each message's turn runs at once, the echo expert
       answering in a card on the fake Lark, so turns run while ingest is measured; the fake is
       told of every message wrk sends, as Lark knows the messages it delivers - without that it
       refused every reply and reaction (230001 / 231003) and no card was shown; the card's
       updateIntervalMs is the integration's default. The daemon's rounds add ``per_event``: its
       events by intake outcome, turns ended and platform calls by endpoint:code, per event)
       python bench/lark_ingest.py --python-client [--events 3000] [--connections 32]
       python bench/lark_ingest.py --profile   (cProfile of the daemon's webhook path, in process)
       python bench/lark_ingest.py --py-spy [--concurrency 16]   (the daemon process under load,
           sampled by py-spy: its time by component and the top frames, as JSON)
       python bench/lark_ingest.py --workers 2 [--duration 10] [--connections 64] [--rounds 3]
           (1 and 2 worker processes under wrk, CPU per event from /proc: bench/lark_workers.py)
``--redis-url`` (default: a private redis-server) is the daemon's Redis for the main mode;
``--profile``, ``--py-spy`` and ``--workers`` use $REDIS_URL (default redis://127.0.0.1:6379/0).
The bench's keys are deleted on the way out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from guards import ingest_guards
from lark_bench import (
    DAEMONS,
    Server,
    bench_config,
    delete_keys,
    drive,
    log,
    payloads,
    private_redis,
    serve,
)
from procstat import Cores, cpu_seconds, loadavg
from wrk_support import ensure_wrk, run_wrk, write_payloads

from tests.fakes.lark import FakeLark
from tests.support.helpers import command_calls

NAMES = ("daemon", "bare", "lark_oapi")


def names(floor: bool) -> tuple[str, ...]:
    return (*NAMES, "floor") if floor else NAMES


async def command_counts(redis_url: str) -> dict[str, int]:
    client = aioredis.Redis.from_url(redis_url)
    try:
        return await command_calls(client)
    finally:
        await client.aclose()


@contextlib.asynccontextmanager
async def servers(
    redis_url: str,
    workdir: Path,
    cores: Cores,
    *,
    floor: bool = False,
    fake: FakeLark | None = None,
) -> AsyncIterator[tuple[dict[str, Server], str]]:
    """The three servers (four with ``floor``), started and pinned; yields them and the
    daemon's key prefix. With ``fake`` (a started fake Lark), the daemon's turns run at once
    and answer there."""
    async with bench_config(redis_url, answering=fake is not None, fake=fake) as config:
        running = {
            "daemon": Server.daemon(config, workdir, cores.server),
            "bare": Server.handler("bare", workdir, cores.server),
            "lark_oapi": Server.handler("lark_oapi", workdir, cores.server),
        }
        if floor:
            running["floor"] = Server.daemon(config, workdir, cores.server, floor=True)
        try:
            for server in running.values():
                await server.start()
            yield running, str(config["redis"]["keyPrefix"])
        finally:
            for server in running.values():
                await server.stop()


async def forget_events(redis_url: str, prefix: str) -> None:
    """Drop the events a daemon round stored (bursts, dedup marks), so every round starts with
    Redis as the first did (the events of the next round are new anyway)."""
    for pattern in ("*:dedup:*", "*:burst", "*:burstmeta"):
        await delete_keys(redis_url, f"{prefix}:{pattern}")


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per server its median round (by events/s) with every round's figures alongside; the
    ratios of the daemon to the others, of the medians and round by round."""
    out: dict[str, Any] = {"servers": {}}
    for name, rs in runs.items():
        median = sorted(rs, key=lambda x: x["events_s"])[len(rs) // 2]
        out["servers"][name] = {
            **median,
            "rounds_events_s": [x["events_s"] for x in rs],
            "rounds_p99_ms": [x["p99_ms"] for x in rs],
            "rounds_cpu_ms_per_event": [x["cpu_ms_per_event"] for x in rs],
            "rounds_other_cores": [x["other_cores"] for x in rs],
        }
    # The ratios of the median rounds shown (with an even number of rounds, the upper one).
    med = {n: out["servers"][n]["events_s"] for n in runs}
    pairs = [("daemon", "bare"), ("daemon", "lark_oapi")]
    if "floor" in runs:
        pairs += [("floor", "bare"), ("daemon", "floor")]
    for mine, other in pairs:
        out[f"{mine}_over_{other}"] = round(med[mine] / med[other], 3)
        out[f"rounds_{mine}_over_{other}"] = [
            round(d["events_s"] / o["events_s"], 3)
            for d, o in zip(runs[mine], runs[other], strict=True)
        ]
    return out


async def counted(server: Server, family: str, *labels: str) -> dict[str, float]:
    """A counter family of the daemon's /metrics summed by the values of ``labels`` (joined
    by ``:``)."""
    counts: dict[str, float] = {}
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{server.port}/metrics") as resp:
            text = await resp.text()
    for line in text.splitlines():
        if line.startswith(family + "{"):
            series, _, value = line.rpartition(" ")
            key = ":".join(series.partition(f'{n}="')[2].partition('"')[0] for n in labels)
            counts[key] = counts.get(key, 0.0) + float(value)
    return counts


async def ingested(server: Server) -> dict[str, float]:
    """The daemon's ``xgw_ingested_total`` by status (its /metrics)."""
    return await counted(server, "xgw_ingested_total", "status")


async def turn_work(server: Server) -> dict[str, float]:
    """What the daemon did so far beside storing: events by intake outcome, turns ended (any
    outcome) and platform API calls by endpoint (its /metrics)."""
    outcomes = await ingested(server)
    turns = await counted(server, "xgw_turns_total", "outcome")
    calls = await counted(server, "xgw_platform_api_calls_total", "endpoint", "code")
    return {
        **{f"ingested:{k}": v for k, v in outcomes.items()},
        "turns": sum(turns.values()),
        **{f"calls:{k}": v for k, v in calls.items()},  # endpoint:code
    }


async def compare_wrk(args: argparse.Namespace) -> dict[str, Any]:
    cores = Cores.plan(not args.no_pin)
    if cores.client is not None:
        os.sched_setaffinity(0, set(cores.client))  # this script: off the servers' core
    load_before = loadavg()
    with tempfile.TemporaryDirectory(prefix="xgw-lark-") as tmp:
        workdir = Path(tmp)
        async with contextlib.AsyncExitStack() as stack:
            redis_url = args.redis_url or await stack.enter_async_context(
                private_redis(workdir, cores.client)
            )
            fake: FakeLark | None = None
            if args.answering:  # the turns' Lark, told of every message wrk will send
                fake = FakeLark()
                await fake.start()
                stack.push_async_callback(fake.stop)
            running, prefix = await stack.enter_async_context(
                servers(redis_url, workdir, cores, floor=args.floor, fake=fake)
            )
            result = await rounds(args, running, prefix, redis_url, workdir, cores, fake)
            if args.floor:  # its Envelopes are each seen once while their marks are kept
                result["floor_repeats"] = (await ingested(running["floor"])).get("duplicate", 0)
    pinned: dict[str, list[int]] | None = cores.describe(
        daemon="server", bare="server", lark_oapi="server", wrk="client", bench="client"
    )
    if pinned is not None and args.floor:
        pinned["floor"] = pinned["daemon"]
    if pinned is not None and not args.redis_url:
        pinned["redis"] = pinned["wrk"]
    result.update(
        client="wrk",
        answering=args.answering,
        connections=args.connections,
        duration_s=args.duration,
        rounds=args.rounds,
        cores=os.cpu_count(),
        pinned=pinned,
        redis=args.redis_url or "private",
        loadavg_before=load_before,
        loadavg_after=loadavg(),
    )
    return result


async def rounds(
    args: argparse.Namespace,
    running: dict[str, Server],
    prefix: str,
    redis_url: str,
    workdir: Path,
    cores: Cores,
    fake: FakeLark | None = None,
) -> dict[str, Any]:
    receive = fake.receive if fake is not None else None

    async def one(name: str, file: Path, duration: float) -> dict[str, Any]:
        server = running[name]
        answering = args.answering and name in DAEMONS
        before = await turn_work(server) if answering else {}
        res = await run_wrk(
            server.url,
            file,
            duration=duration,
            connections=args.connections,
            pids=server.pids(),
            redis_url=redis_url if name in DAEMONS else None,
            cores=cores.client,
        )
        if answering:  # the turns that ended while wrk ran, per event answered
            after = await turn_work(server)
            events = max(res["requests"], 1)
            res["per_event"] = {
                k: round((v - before.get(k, 0.0)) / events, 4) for k, v in after.items()
            }
        return res

    # Warm-up (3 s each), which also gives a first guess of each rate to size the files by.
    warm = workdir / "warm.tsv"
    await asyncio.to_thread(write_payloads, warm, 20_000, receive)
    servers_run = names(args.floor)
    rates = {name: (await one(name, warm, 3))["events_s"] for name in servers_run}
    log(f"warm-up events/s: {rates}")
    await forget_events(redis_url, prefix)
    stats_before = await command_counts(redis_url)
    sent = 0
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in servers_run}
    file = workdir / "events.tsv"
    for r in range(args.rounds):
        need = int(max(rates["daemon"], rates["lark_oapi"], 1000) * args.duration * 1.5)
        await asyncio.to_thread(write_payloads, file, need, receive)  # fresh ids, timestamps
        for name in servers_run:
            res = await one(name, file, args.duration)
            runs[name].append({**res, "events_in_file": need})
            rates[name] = max(rates[name], res["events_s"])
            if name in DAEMONS:
                sent += res["requests"]  # each request is one stored event, either daemon
                await forget_events(redis_url, prefix)
            if res["wraps"] and name not in ("bare", "floor"):  # both ignore the bodies
                log(f"round {r + 1}: {name} ran through the payload file ({res['wraps']} wraps)")
            log(
                f"round {r + 1} {name}: {res['events_s']} events/s, p99 {res['p99_ms']} ms, "
                f"{res['cpu_ms_per_event']} ms CPU/event, other cores {res['other_cores']}"
                + (f", per event {res['per_event']}" if "per_event" in res else "")
            )
    stats_after = await command_counts(redis_url)
    delta = {k: stats_after.get(k, 0) - stats_before.get(k, 0) for k in stats_after}
    for ours in ("info", "scan", "unlink", "hello", "client|setinfo"):  # this script's own
        delta.pop(ours, None)
    result = summarise(runs)
    result["daemon_redis"] = {
        "events": sent,
        "evalsha_per_event": round(delta.get("evalsha", 0) / max(sent, 1), 3),
        # Calls per command, the scripts' own calls included (Redis counts those too).
        "commands_per_event": {
            k: round(v / max(sent, 1), 3) for k, v in sorted(delta.items()) if v
        },
    }
    return result


# --- the Python client: a fallback where wrk cannot be had ------------------------------------
async def compare_python(args: argparse.Namespace) -> dict[str, Any]:
    """The same three servers driven by one Python process (aiohttp, ``--connections``
    workers, ``--events`` per round): client-bound near 12,000 requests/s."""
    load_before = loadavg()
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in NAMES}
    with tempfile.TemporaryDirectory(prefix="xgw-lark-") as tmp:
        workdir = Path(tmp)
        async with contextlib.AsyncExitStack() as stack:
            redis_url = args.redis_url or await stack.enter_async_context(
                private_redis(workdir, None)
            )
            running, _prefix = await stack.enter_async_context(servers(redis_url, workdir, Cores()))
            for server in running.values():
                await drive(server.port, payloads(300), 8)  # warm-up
            for r in range(args.rounds):
                items = payloads(args.events)
                for name in NAMES:
                    server = running[name]
                    cpu = cpu_of(server)
                    res = await drive(server.port, items, args.connections)
                    res["cpu_ms_per_event"] = round((cpu_of(server) - cpu) * 1000 / args.events, 4)
                    res["other_cores"] = None
                    runs[name].append(res)
                    log(f"round {r + 1} {name}: {res}")
    return {
        **summarise(runs),
        "client": "python (client-bound)",
        "connections": args.connections,
        "events_per_round": args.events,
        "rounds": args.rounds,
        "pinned": None,
        "redis": "private" if not args.redis_url else args.redis_url,
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
    }


def cpu_of(server: Server) -> float:
    return cpu_seconds(server.pids())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, default=10.0, help="s per server and round")
    parser.add_argument("--connections", type=int, default=None, help="wrk's -c (default 32)")
    parser.add_argument("--rounds", type=int, default=None, help="default 5 (--workers: 3)")
    parser.add_argument("--no-pin", action="store_true", help="leave every process unpinned")
    parser.add_argument("--floor", action="store_true", help="also the daemon, Lark work free")
    parser.add_argument(
        "--answering",
        action="store_true",
        help="the daemon's turns run while ingest is measured (echo, summary window 0)",
    )
    parser.add_argument("--redis-url", default=None, help="the daemon's Redis (default: private)")
    parser.add_argument("--python-client", action="store_true", help="the fallback client")
    parser.add_argument("--events", type=int, default=3000, help="Python client: per round")
    parser.add_argument("--concurrency", default="16", help="--py-spy: concurrent requests")
    parser.add_argument("--serve", choices=["bare", "lark_oapi"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--py-spy", dest="py_spy", action="store_true")
    parser.add_argument("--workers", type=int, default=0, help="compare 1 and N workers (wrk)")
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port)
        return
    if args.workers:
        import lark_workers

        connections, rounds = args.connections or 64, args.rounds or 3
        lark_workers.main(args.workers, args.duration, connections, rounds)
        return
    if args.profile or args.py_spy:
        import lark_profile

        if args.profile:
            asyncio.run(lark_profile.profile(args.events))
            return
        exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        if not Path(exe).exists():
            raise SystemExit("py-spy is not installed: pip install py-spy")
        level = int(args.concurrency.split(",")[0])
        print(json.dumps(asyncio.run(lark_profile.spy(exe, args.events, level))))
        return
    args.connections = args.connections or 32
    args.rounds = args.rounds or 5
    if not args.python_client and ensure_wrk() is None:
        log("wrk is missing and cannot be installed: the Python client runs (client-bound)")
        args.python_client = True
    run = compare_python if args.python_client else compare_wrk
    result = asyncio.run(run(args))
    if "daemon_over_lark_oapi" in result and not args.python_client:  # wrk's figures only
        result["guards"] = ingest_guards(result["daemon_over_lark_oapi"])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
