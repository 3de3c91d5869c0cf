"""Chaos run: replicas on one Redis, faults mid-run, and a check that nothing is lost or doubled.

Starts its OWN Redis (``--redis standalone``: a redis-server on a free port; ``--redis cluster``:
the 3-primary cluster of ``tests/support/cluster.py``) and R replicas (``python -m gateway run``,
real processes), then plays a chat platform: N conversations x K messages through the console
API, spread over ``--duration`` seconds, every message delivered ``--deliveries`` times (same
eventId) to different replicas; a delivery refused (503, connection refused or reset, no answer
within ``--post-timeout``) is retried with exponential backoff and jitter on the next replica, as
a platform behind a load balancer does. Mid-run the busiest replica is SIGKILLed and restarted,
and Redis is paused (SIGSTOP/SIGCONT of its processes, or ``CLIENT PAUSE … ALL``).

Then every conversation's transcript is read back through the console API. The echo expert
quotes its (possibly merged) input one line per message, so each accepted message must be quoted
exactly once across the conversation's cards, in sending order, and every card must be final.
Prints ONE JSON line: sent, accepted, lost, duplicated, out_of_order, stuck, seconds, and
diagnostics: responses, retries, faults; from the audit stream the turns, the resumed ones, and
``turns_recorded_twice`` / ``overlapping_turns`` (a turn whose expert ran to its end on two
replicas: the user sees one answer in one card, but the expert was called twice; see
docs/scaling.md, "Redis stalls and the lease"); Redis commands, bytes and CPU per message.

Usage: python bench/chaos.py [--conversations 30] [--messages 20] [--duration 30]
       [--redis standalone|cluster] [--pause-mode sigstop|client] [--lease-seconds 3]
       [--no-faults] [--deliveries 3] [--window 0] [--step-ms 100] [--memory] [--monitor]
``--no-faults --deliveries 1`` is the measuring run of docs/scaling.md.
Exit status 0 when nothing was lost, doubled, out of order or stuck; 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import re
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.chaos_monitor import Monitor
from bench.chaos_redis import RedisLauncher, dump_keys, launcher
from bench.chaos_replica import INTEGRATION, Replica, replica_config
from bench.chaos_verdict import Verdict, audit_checks, judge


def log(msg: str) -> None:
    print(f"[chaos] {msg}", file=sys.stderr, flush=True)


def now() -> float:
    return time.monotonic()


# --- the platform side -------------------------------------------------------------------------
@dataclass
class Message:
    conv: int
    seq: int
    chat: str
    text: str
    event_id: str
    accepted: bool = False


@dataclass
class Platform:
    """Delivers messages as a platform does: each several times, retried until stored."""

    opts: argparse.Namespace
    replicas: list[Replica]
    http: aiohttp.ClientSession
    rng: random.Random
    responses: Counter[str] = field(default_factory=Counter)
    intake: Counter[str] = field(default_factory=Counter)
    refusals: Counter[str] = field(default_factory=Counter)  # status and body of each non-202
    retries: int = 0
    background: set[asyncio.Task[bool]] = field(default_factory=set)

    async def post(self, replica: Replica, msg: Message) -> str:
        body = {
            "integrationId": INTEGRATION,
            "chatId": msg.chat,
            "chatType": "p2p",
            "senderId": f"u{msg.conv}",
            "text": msg.text,
            "eventId": msg.event_id,
        }
        try:
            async with self.http.post(
                f"{replica.base}/console/api/messages",
                json=body,
                timeout=aiohttp.ClientTimeout(total=self.opts.post_timeout),
            ) as resp:
                if resp.status == 202:
                    data = await resp.json(content_type=None)
                    self.intake[str(data.get("status"))] += 1
                else:
                    text = (await resp.text())[:200]
                    self.refusals[f"{resp.status} {text}"] += 1
                return str(resp.status)
        except TimeoutError:
            return "timeout"
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            return type(exc).__name__

    async def deliver(self, msg: Message, first: int, delay: float) -> bool:
        """One delivery of ``msg``: retried with backoff, each retry on the next replica."""
        await asyncio.sleep(delay)
        deadline = now() + self.opts.give_up_seconds
        index, attempt = first, 0
        while True:
            outcome = await self.post(self.replicas[index], msg)
            self.responses[outcome] += 1
            if outcome == "202":
                msg.accepted = True
                return True
            if outcome.startswith("4") and outcome != "429":
                return False  # refused for good: a bug in this harness, reported as unaccepted
            attempt += 1
            if now() > deadline:
                return False
            self.retries += 1
            await asyncio.sleep(min(2.0, 0.05 * 2**attempt) * (0.5 + self.rng.random() / 2))
            index = (index + 1) % len(self.replicas)

    async def send(self, msg: Message) -> None:
        """All deliveries of one message at about the same time to different replicas; returns
        once one was stored (or all gave up). The others go on in the background."""
        order = self.rng.sample(range(len(self.replicas)), len(self.replicas))
        tasks = [
            asyncio.create_task(
                self.deliver(msg, order[n % len(order)], 0 if n == 0 else self.rng.random() * 0.05)
            )
            for n in range(self.opts.deliveries)
        ]
        self.background.update(tasks)
        for task in tasks:
            task.add_done_callback(self.background.discard)
        pending: set[asyncio.Task[bool]] = set(tasks)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if any(t.result() for t in done):
                return

    async def conversation(self, messages: list[Message], t0: float, phase: float) -> None:
        gap = self.opts.duration / len(messages)
        for msg in messages:
            wait = t0 + (msg.seq + phase) * gap + self.rng.random() * gap * 0.3 - now()
            if wait > 0:
                await asyncio.sleep(wait)
            await self.send(msg)


# --- the faults ----------------------------------------------------------------------------------
async def faults(
    opts: argparse.Namespace,
    redis: RedisLauncher,
    replicas: list[Replica],
    http: aiohttp.ClientSession,
    t0: float,
    events: list[dict[str, Any]],
) -> None:
    def mark(fault: str, **extra: Any) -> None:
        events.append({"fault": fault, "at_s": round(now() - t0, 2), **extra})
        log(f"{fault} {extra}")

    if opts.kill_at is not None:
        await asyncio.sleep(max(0.0, t0 + opts.kill_at * opts.duration - now()))
        # The busiest replica, so that the kill lands mid-turn (up to 3 s of looking).
        victim, active, deadline = replicas[0], -1, now() + 3
        while now() < deadline and active < 1:
            counts = await asyncio.gather(*(r.active_runs(http) for r in replicas))
            active = max(counts)
            victim = replicas[counts.index(active)]
            if active < 1:
                await asyncio.sleep(0.05)
        victim.kill(signal.SIGKILL)
        mark("sigkill", replica=victim.name, active_runs=active)
        await asyncio.sleep(opts.restart_after)
        await victim.start(http)
        mark("restarted", replica=victim.name)
    if opts.pause_seconds > 0:
        await asyncio.sleep(max(0.0, t0 + opts.pause_at * opts.duration - now()))
        mark("redis paused", how=opts.pause_mode, seconds=opts.pause_seconds)
        await redis.pause(opts.pause_seconds, opts.pause_mode)
        mark("redis resumed")


# --- reading the result back ---------------------------------------------------------------------
async def transcript(
    chat: str, replicas: list[Replica], http: aiohttp.ClientSession
) -> list[dict[str, Any]] | None:
    for replica in sorted(replicas, key=lambda r: not r.alive):
        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError, ValueError):
            async with http.get(
                f"{replica.base}/console/api/chats/{chat}/messages",
                params={"integrationId": INTEGRATION},
                timeout=aiohttp.ClientTimeout(total=10),
            ) as resp:
                if resp.status == 200:
                    records: list[dict[str, Any]] = (await resp.json())["messages"]
                    return records
    return None


async def inspect(
    convs: list[list[Message]], replicas: list[Replica], http: aiohttp.ClientSession
) -> Verdict:
    records = await asyncio.gather(*(transcript(c[0].chat, replicas, http) for c in convs))
    return judge(
        [
            ([m.text for m in conv], {m.text for m in conv if m.accepted}, recs)
            for conv, recs in zip(convs, records, strict=True)
        ]
    )


async def settle(
    opts: argparse.Namespace,
    convs: list[list[Message]],
    replicas: list[Replica],
    http: aiohttp.ClientSession,
) -> Verdict:
    """Until every accepted message is answered and every card final (or the deadline); then one
    more look after the lease time, which would show a turn run again late."""
    deadline = now() + opts.settle_timeout
    verdict = await inspect(convs, replicas, http)
    while not verdict.complete and now() < deadline:
        await asyncio.sleep(0.5)
        verdict = await inspect(convs, replicas, http)
    if verdict.complete:
        await asyncio.sleep(opts.lease_seconds + 1)
        verdict = await inspect(convs, replicas, http)
    return verdict


async def left_behind(redis: RedisLauncher, prefix: str, chats: list[str]) -> dict[str, Any]:
    """What Redis holds for the conversations that lost messages (their keys, and their entries
    in the due index), so a failed run says where the messages stopped."""
    if not chats:
        return {}
    keys = await dump_keys(redis.nodes, f"{prefix}:*")
    out: dict[str, Any] = {}
    for chat in chats:
        mine = re.compile(rf"(^|[^0-9A-Za-z-]){re.escape(chat)}($|[^0-9])")
        out[chat] = {k: v for k, v in keys.items() if mine.search(k)}
        out[chat]["due"] = [
            (k, m)
            for k, v in keys.items()
            if v["type"] == "zset" and k.endswith(":due")
            for m in v["value"]
            if mine.search(str(m[0]))
        ]
    return out


# --- the run -------------------------------------------------------------------------------------
async def run(opts: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    rng = random.Random(opts.seed)
    prefix = f"chaos{uuid.uuid4().hex[:8]}"
    nonce = uuid.uuid4().hex[:6]
    redis = launcher(opts.redis, workdir)
    await redis.start()
    replicas: list[Replica] = []
    connector = aiohttp.TCPConnector(limit=0)
    try:
        async with aiohttp.ClientSession(connector=connector) as http:
            for n in range(opts.replicas):
                config = replica_config(opts, redis, prefix, workdir / f"data-{n}")
                replicas.append(Replica(f"replica-{n}", config, workdir))
            await asyncio.gather(*(r.start(http) for r in replicas))
            return await drive(opts, redis, replicas, http, rng, prefix, nonce)
    finally:
        codes = await asyncio.gather(*(r.stop() for r in replicas))
        if any(c not in (0, None) for c in codes):
            log(f"replica exit codes {codes}")
        await redis.stop()


async def drive(
    opts: argparse.Namespace,
    redis: RedisLauncher,
    replicas: list[Replica],
    http: aiohttp.ClientSession,
    rng: random.Random,
    prefix: str,
    nonce: str,
) -> dict[str, Any]:
    convs = [
        [
            Message(i, j, f"chaos-{i}", f"c{i} m{j:03d} {nonce}", f"evt-{nonce}-{i}-{j}")
            for j in range(opts.messages)
        ]
        for i in range(opts.conversations)
    ]
    stats = redis.stats()
    await stats.open()
    await asyncio.sleep(2.0)  # the replicas' start-up work done before idle is measured
    cpu_idle, t_idle = sum(r.cpu_s() for r in replicas), now()
    idle = await stats.idle_rate(3.0)
    idle_cpu_rate = (sum(r.cpu_s() for r in replicas) - cpu_idle) / (now() - t_idle)
    before = await stats.snapshot()
    cpu_before = sum(r.cpu_s() for r in replicas)
    monitor = Monitor(redis.nodes, prefix) if opts.monitor else None
    if monitor is not None:
        await monitor.start()
    platform = Platform(opts, replicas, http, rng)
    events: list[dict[str, Any]] = []
    t0 = now()
    fault_task = asyncio.create_task(faults(opts, redis, replicas, http, t0, events))
    await asyncio.gather(
        *(platform.conversation(c, t0, i / len(convs)) for i, c in enumerate(convs))
    )
    sends_s = now() - t0
    if platform.background:  # the other deliveries of the last messages
        await asyncio.wait(set(platform.background), timeout=opts.give_up_seconds + 5)
    await fault_task
    quiet = await stats.wait_quiet(idle, deadline=now() + opts.settle_timeout)
    after = await stats.snapshot()
    calls = await monitor.stop(sum(m.accepted for c in convs for m in c)) if monitor else None
    # Net of the replicas' idle polling; meaningful in a run without a kill.
    replica_cpu = sum(r.cpu_s() for r in replicas) - cpu_before - idle_cpu_rate * (now() - t0)
    window_s = after.at - before.at
    busy_s = window_s - opts.pause_seconds  # nothing polls a paused Redis
    verdict = await settle(opts, convs, replicas, http)
    seconds = now() - t0
    lost_state = await left_behind(redis, prefix, [convs[n][0].chat for n in verdict.lost_in[:2]])
    audit = audit_checks(await redis.audit_rows(prefix))
    memory = await redis.memory(prefix) if opts.memory else None
    await stats.close()
    accepted = sum(m.accepted for c in convs for m in c)
    logs: Counter[str] = Counter()
    for r in replicas:
        logs.update(r.log_events())
    return {
        "sent": sum(len(c) for c in convs),
        "accepted": accepted,
        "lost": verdict.lost,
        "duplicated": verdict.duplicated,
        "out_of_order": verdict.out_of_order,
        "stuck": verdict.stuck,
        "seconds": round(seconds, 1),
        "redis": opts.redis,
        "replicas": opts.replicas,
        "conversations": opts.conversations,
        "messages_per_conversation": opts.messages,
        "deliveries_per_message": opts.deliveries,
        "sends_s": round(sends_s, 1),
        "responses": dict(platform.responses),
        "intake": dict(platform.intake),
        "refusals": dict(platform.refusals.most_common(5)),
        "retries": platform.retries,
        "faults": events,
        "cards": verdict.cards,
        "error_cards": verdict.error_cards,
        "unknown_lines": verdict.unknown_lines,
        "answered_unaccepted": verdict.answered_unaccepted,
        "user_record_dups": verdict.user_record_dups,
        "unreadable_chats": verdict.unreadable,
        **audit,
        "redis_traffic": stats.per_message(before, after, idle, busy_s, accepted, audit),
        **({"redis_memory_by_kind": memory} if memory is not None else {}),
        **({"monitor": calls} if calls is not None else {}),
        **({"lost_in": [convs[n][0].chat for n in verdict.lost_in]} if verdict.lost_in else {}),
        **({"lost_state": lost_state} if lost_state else {}),
        "replica_cpu_ms_per_message": (
            round(replica_cpu * 1000 / max(accepted, 1), 2) if opts.kill_at is None else None
        ),
        "settled_quietly": quiet,
        "replica_log": dict(logs.most_common(12)),
        "replica_starts": sum(r.starts for r in replicas),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--conversations", type=int, default=30)
    p.add_argument("--messages", type=int, default=20, help="messages per conversation (<= 200)")
    p.add_argument("--duration", type=float, default=30, help="seconds the sends are spread over")
    p.add_argument("--deliveries", type=int, default=3, help="deliveries of each message")
    p.add_argument("--redis", choices=("standalone", "cluster"), default="standalone")
    p.add_argument("--pause-mode", choices=("sigstop", "client"), default="sigstop")
    p.add_argument("--pause-seconds", type=float, default=8)
    p.add_argument("--pause-at", type=float, default=0.5, help="fraction of --duration")
    p.add_argument("--kill-at", type=float, default=0.25, help="fraction of --duration")
    p.add_argument(
        "--restart-after", type=float, default=1.0, help="seconds a killed one stays down"
    )
    p.add_argument("--no-faults", action="store_true", help="no kill, no pause (a measuring run)")
    p.add_argument("--lease-seconds", type=float, default=3)
    p.add_argument("--window", type=float, default=0, help="summaryWindowSeconds")
    p.add_argument("--step-ms", type=int, default=100, help="the echo expert's stepDelayMs")
    p.add_argument("--post-timeout", type=float, default=3, help="a platform's ack timeout")
    p.add_argument("--give-up-seconds", type=float, default=120)
    p.add_argument("--settle-timeout", type=float, default=90)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--memory", action="store_true", help="report MEMORY USAGE by key kind")
    p.add_argument(
        "--monitor",
        action="store_true",
        help="calls and request bytes by command and script from MONITOR (its stream inflates "
        "the output bytes of INFO: measure bytes in a run without it)",
    )
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    opts = p.parse_args(argv)
    if opts.no_faults:
        opts.kill_at, opts.pause_seconds = None, 0
    if not (1 <= opts.messages <= 200) or opts.conversations < 1 or opts.replicas < 1:
        p.error("--messages must be 1..200; --conversations and --replicas positive")
    if opts.deliveries < 1 or opts.duration <= 0:
        p.error("--deliveries and --duration must be positive")
    return opts


def clean(result: dict[str, Any]) -> bool:
    return bool(
        result["accepted"] == result["sent"]
        and result["lost"] == result["duplicated"] == result["out_of_order"] == 0
        and result["stuck"] == 0
    )


async def run_stoppable(opts: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """``run``, cancelled by SIGTERM or SIGINT (also when started in the background, where a
    shell ignores SIGINT) so that its replicas and Redis are stopped on the way out."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    return await run(opts, workdir)


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="xgw-chaos-"))
    try:
        result = asyncio.run(run_stoppable(opts, workdir))
    except asyncio.CancelledError:
        log("stopped by a signal")
        return 130
    finally:
        if opts.keep:
            log(f"work directory kept: {workdir}")
        else:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result, separators=(",", ":")), flush=True)
    return 0 if clean(result) else 1


if __name__ == "__main__":
    raise SystemExit(main())
