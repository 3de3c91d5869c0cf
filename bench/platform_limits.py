"""Live Lark cards at the platform's real limits: N replicas, one fake Lark enforcing them.

One private redis-server; ONE fake Lark in this process with Lark's limits on
(``tests/fakes/limits.py``: 50 calls/s and 1,000/min per API, 5 sends/s per chat, 5 PATCH/s per
message, 10 CardKit operations/s per card unless streaming; ``--no-limits`` only records;
``--count-refused``: a refused call counts against the limits too, which no Lark page settles
either way); and ``--replicas`` daemons (``python -m gateway run``) on that Redis under one key
prefix, each with the same Lark integration (one appId, webhook mode, encryptKey and verification
token, ``apiBase`` the fake, ``updateIntervalMs`` ``--update-interval-ms``). The echo expert
streams a reply of about 100 characters, 2 at a time, paced so a turn runs ``--turn-seconds``.

Load: ``--turns`` signed, encrypted ``im.message.receive_v1`` webhooks arriving evenly over
``--arrival-seconds``, round-robin over the replicas, each turn in its own p2p chat (``--chats
N``: N group chats shared, the bot @-mentioned, one sender per turn). The bench waits (at most
``--deadline-s``) until every turn's card shows a final state on the fake (its title is a final
status's, gateway/progress.py), or the turn answered in text instead, then 2 s for the calls
that follow (the typing reaction coming off).

Prints ONE JSON line:
- ``calls_by_api``: every answer the fake gave, by API (method and route) and result code;
  ``calls``, ``calls_per_turn``, ``throttled`` (429 / 99991400 / 230020 / 99991403 answers) and
  ``throttled_share`` of the calls;
- ``finals_delivered`` / ``turns`` (``finals_as_text``: turns whose card never turned final but
  whose answer came as text);
- ``first_card_ms`` / ``final_card_ms`` p50/p99/max from when the webhook was sent: the first
  card is the successful reply carrying it, the final card the card's last successful write;
- ``stalest_live_card_s``: per card the largest gap between successive successful writes while
  its turn was live (first card to final; a card not final by the deadline counts up to it),
  p50/p99/max over the cards;
- per replica: peak RSS (VmHWM, /proc), CPU seconds, the warnings it logged, and from its
  /metrics every series about budgets, throttling, quotas or coalescing (whatever the build
  exposes: the bench runs before and after a platform budget exists).

Usage: python bench/platform_limits.py [--replicas 3] [--turns 300] [--arrival-seconds 15]
       [--turn-seconds 15] [--update-interval-ms 1000] [--chats 0] [--card-mode patch|cardkit]
       [--no-limits] [--count-refused] [--deadline-s S] [--json-only]
       python bench/platform_limits.py --replicas 1 --turns 2000   (the 2,000-live-turn target)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import math
import re
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.chaos_redis import StandaloneRedis  # noqa: E402
from bench.chaos_replica import Replica  # noqa: E402
from bench.limits_platforms import PlatformRun, bench_platform, judge  # noqa: E402
from bench.procstat import loadavg, memory_mb  # noqa: E402
from gateway.progress import FINAL, STATUS_TITLES  # noqa: E402
from tests.fakes.lark import FakeLark  # noqa: E402
from tests.fakes.limits import Answer, LarkLimits  # noqa: E402
from tests.support.lark import INTEGRATION, bot_mention, lark_integration, message_event, sealed  # noqa: E402
from tests.support.metrics import Scrape  # noqa: E402

FINAL_TITLES = {STATUS_TITLES[s] for s in FINAL}
BUDGETISH = re.compile(r"budget|throttl|quota|platform_limit|stalest|coalesc|bucket")
MESSAGE_PATH = re.compile(r"^/open-apis/im/v1/messages/([^/]+)(/reply)?$")
CARD_PATH = re.compile(r"^/open-apis/cardkit/v1/cards/([^/]+)")
OPTS: argparse.Namespace | None = None


def log(msg: str) -> None:
    if OPTS is None or not OPTS.json_only:
        print(f"[limits] {msg}", file=sys.stderr, flush=True)


def now_ms() -> float:
    return time.monotonic() * 1000  # the fake's limits use the same clock


def pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


def spread(values: list[float], scale: float = 1.0) -> dict[str, Any]:
    out = {"p50": pct(values, 50), "p99": pct(values, 99), "max": max(values, default=None)}
    return {k: None if v is None else round(v / scale, 2) for k, v in out.items()} | {
        "count": len(values)
    }


@dataclass
class Turn:
    index: int
    chat: str
    sender: str
    message_id: str
    posted_ms: float = 0.0
    status: int = 0
    card: str | None = None  # the card's message id on the fake
    done_ms: float | None = None  # when the bench saw it final (or answered in text)
    as_text: bool = False


@dataclass
class Run:
    fake: FakeLark
    limits: LarkLimits
    turns: list[Turn]
    replicas: list[Replica] = field(default_factory=list)


def replica_config(
    opts: argparse.Namespace, fake: FakeLark | PlatformRun, redis_url: str, prefix: str, data: Path
) -> dict[str, Any]:
    reply_chars = 112  # "You said:\n> " + the ~100-character text of each turn
    char_delay = max(1, round(opts.turn_seconds * 1000 / reply_chars))
    if isinstance(fake, PlatformRun):
        integration = fake.integration()
    else:
        integration = lark_integration(
            fake,
            summaryWindowSeconds=0,
            maxWindowSeconds=5,
            updateIntervalMs=opts.update_interval_ms,
            cardMode=opts.card_mode,
        )
    return {
        "server": {"host": "127.0.0.1"},
        "redis": {"url": redis_url, "keyPrefix": prefix, "connectTimeoutSeconds": 10},
        "dataDir": str(data),
        "logging": {"level": "warning", "format": "json"},
        "runtime": {"shutdownGraceSeconds": 3, "maxConcurrentRuns": max(200, opts.turns + 10)},
        "experts": [
            {
                "id": "echo",
                "kind": "echo",
                "stepTitles": ["Echo"],
                "stepDelayMs": 0,
                "charDelayMs": char_delay,
                "chunkChars": 2,
            }
        ],
        "integrations": [integration],
    }


def make_turns(opts: argparse.Namespace, fake: FakeLark) -> list[Turn]:
    turns = []
    for i in range(opts.turns):
        chat = f"oc_g{i % opts.chats}" if opts.chats else f"oc_p{i}"
        sender = f"ou_u{i}"
        fake.users[sender] = {"open_id": sender, "name": f"User {i}", "email": f"u{i}@example.com"}
        turns.append(Turn(i, chat, sender, f"om_t{i:05d}{uuid.uuid4().hex[:8]}"))
    return turns


def event_of(opts: argparse.Namespace, turn: Turn) -> dict[str, Any]:
    text = f"turn {turn.index} " + "x" * 100
    if opts.chats:
        return message_event(
            f"@_user_1 {text}"[:100],
            chat_id=turn.chat,
            chat_type="group",
            sender=turn.sender,
            message_id=turn.message_id,
            mentions=[bot_mention()],
        )
    return message_event(
        text[:100], chat_id=turn.chat, sender=turn.sender, message_id=turn.message_id
    )


async def post_all(opts: argparse.Namespace, run: Run, http: aiohttp.ClientSession) -> None:
    """Every turn's webhook at its time on the schedule, round-robin over the replicas."""
    urls = [f"{r.base}/api/lark/webhook/{INTEGRATION}" for r in run.replicas]
    gap_s = opts.arrival_seconds / max(1, opts.turns)
    start = time.monotonic()

    async def post(turn: Turn) -> None:
        payload = event_of(opts, turn)
        run.fake.receive(payload)  # the message exists on the platform from now on
        body, headers = sealed(payload, nonce=uuid.uuid4().hex[:16])
        turn.posted_ms = now_ms()
        try:
            async with http.post(urls[turn.index % len(urls)], data=body, headers=headers) as r:
                await r.read()
                turn.status = r.status
        except (aiohttp.ClientError, TimeoutError):
            turn.status = -1

    tasks = []
    for turn in run.turns:
        delay = start + turn.index * gap_s - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)  # the arrival schedule, not a wait for a result
        tasks.append(asyncio.create_task(post(turn)))
    await asyncio.gather(*tasks)


def replies_by_parent(fake: FakeLark) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for m in fake.messages.values():
        if m["parent_id"]:
            out.setdefault(m["parent_id"], []).append(m)
    return out


def card_state(fake: FakeLark, turn: Turn, replies: list[dict[str, Any]]) -> None:
    """Mark ``turn`` done when its card on the fake is final, or its answer came as text."""
    cards = [m for m in replies if m["msg_type"] == "interactive"]
    if cards:
        turn.card = cards[0]["message_id"]
        title = fake.card_of(turn.card).get("header", {}).get("title", {}).get("content")
        if title in FINAL_TITLES:
            turn.done_ms = now_ms()
            return
    if any(m["msg_type"] == "text" for m in replies):  # the card failed: the answer as text
        turn.done_ms, turn.as_text = now_ms(), True


async def wait_finals(opts: argparse.Namespace, run: Run) -> bool:
    deadline = time.monotonic() + opts.deadline_s
    while True:
        replies = replies_by_parent(run.fake)
        for turn in run.turns:
            if turn.done_ms is None:
                card_state(run.fake, turn, replies.get(turn.message_id, []))
        left = sum(1 for t in run.turns if t.done_ms is None)
        if not left:
            return True
        if time.monotonic() > deadline:
            log(f"deadline: {left} turns without a final state")
            return False
        await asyncio.sleep(0.5)


def writes_by_card(run: Run) -> dict[str, list[float]]:
    """The times of every successful write of each turn's card (its reply, then updates)."""
    card_ids = {}  # CardKit card id -> its message id
    for m in run.fake.messages.values():
        if m["from_bot"] and m["msg_type"] == "interactive":
            with contextlib.suppress(ValueError, KeyError, TypeError):
                content = json.loads(m["content"])
                if content.get("type") == "card":
                    card_ids[content["data"]["card_id"]] = m["message_id"]
    by_parent = {t.message_id: t for t in run.turns}
    writes: dict[str, list[float]] = {}
    for a in run.limits.answers:
        if a.status != 200 or a.code != 0:
            continue
        target = _card_written(a, by_parent, card_ids)
        if target is not None:
            writes.setdefault(target, []).append(a.at_ms)
    return writes


def _card_written(a: Answer, by_parent: dict[str, Turn], card_ids: dict[str, str]) -> str | None:
    if (m := MESSAGE_PATH.match(a.path)) is not None:
        if m.group(2):  # a reply: the card's first write when it is the turn's card
            turn = by_parent.get(m.group(1))
            return turn.card if turn is not None and a.api.startswith("POST") else None
        return m.group(1) if a.api.startswith("PATCH") else None
    if (c := CARD_PATH.match(a.path)) is not None:
        return card_ids.get(c.group(1))
    return None


def figures(opts: argparse.Namespace, run: Run, end_ms: float) -> dict[str, Any]:
    writes = writes_by_card(run)
    first, final, stalest = [], [], []
    for t in run.turns:
        times = sorted(writes.get(t.card or "", []))
        if not times:
            continue
        first.append(times[0] - t.posted_ms)
        finished = t.done_ms is not None and not t.as_text
        if finished:
            final.append(times[-1] - t.posted_ms)
        live = times if finished else [*times, end_ms]
        stalest.append(max((b - a for a, b in itertools.pairwise(live)), default=0.0))
    answers = run.limits.answers
    throttled = run.limits.throttled()
    return {
        "turns": len(run.turns),
        "posted": sum(1 for t in run.turns if t.status == 200),
        "finals_delivered": sum(1 for t in run.turns if t.done_ms is not None and not t.as_text),
        "finals_as_text": sum(1 for t in run.turns if t.as_text),
        "calls": len(answers),
        "calls_per_turn": round(len(answers) / max(1, len(run.turns)), 2),
        "throttled": len(throttled),
        "throttled_share": round(len(throttled) / max(1, len(answers)), 4),
        "throttled_by_rule": dict(Counter(r.rule for r in run.limits.refusals)),
        "no_card": len(run.turns) - len(first),
        "first_card_ms": spread(first),
        "final_card_ms": spread(final),
        "final_after_turn_end_ms": spread([f - opts.turn_seconds * 1000 for f in final]),
        "stalest_live_card_s": spread(stalest, 1000),
        "calls_by_api": {k.removeprefix("/open-apis"): v for k, v in run.limits.by_api().items()},
    }


async def replica_figures(replica: Replica, http: aiohttp.ClientSession) -> dict[str, Any]:
    out: dict[str, Any] = {"cpu_s": round(replica.cpu_s(), 2)}
    if replica.proc is not None:
        out["rss_peak_mb"] = memory_mb(replica.proc.pid, "VmHWM")
    try:
        async with http.get(f"{replica.base}/metrics") as resp:
            scrape = Scrape(await resp.text())
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        out["metrics_error"] = str(exc)
        return out
    budget: dict[str, float] = {}
    api: dict[str, float] = {}
    for s in scrape.samples:
        if s.name == "xgw_platform_api_calls_total":
            key = f"{s.labels.get('endpoint')}:{s.labels.get('code')}"
            api[key] = api.get(key, 0.0) + s.value
        elif BUDGETISH.search(s.name) and not s.name.endswith(("_created", "_bucket")):
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()) if k != "integration")
            key = f"{s.name}{{{labels}}}"
            budget[key] = budget.get(key, 0.0) + s.value
    out["api_calls_seen"] = dict(sorted(api.items()))
    out["budget_metrics"] = {k: round(v, 3) for k, v in sorted(budget.items())}
    out["log"] = dict(replica.log_events().most_common(8))
    return out


async def bench_lark(opts: argparse.Namespace) -> dict[str, Any]:
    limits = LarkLimits(enforce=not opts.no_limits, count_refused=opts.count_refused)
    fake = FakeLark(limits=limits)
    await fake.start()
    with tempfile.TemporaryDirectory(prefix="xgw-limits-") as tmp:
        workdir = Path(tmp)
        redis = StandaloneRedis(workdir)
        await redis.start()
        run = Run(fake, limits, make_turns(opts, fake))
        prefix = f"limits{uuid.uuid4().hex[:6]}"
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
                for n in range(opts.replicas):
                    config = replica_config(opts, fake, redis.url, prefix, workdir / f"data-{n}")
                    run.replicas.append(Replica(f"replica-{n}", config, workdir))
                    await run.replicas[-1].start(http)
                log(
                    f"{opts.replicas} replicas up; {opts.turns} turns over {opts.arrival_seconds} s"
                )
                calls_before = len(limits.answers)
                t0 = now_ms()
                await post_all(opts, run, http)
                complete = await wait_finals(opts, run)
                end_ms = now_ms()
                await asyncio.sleep(2)  # the calls after a final (the typing reaction coming off)
                result = figures(opts, run, end_ms)
                result["startup_calls"] = calls_before
                result["all_final"] = complete
                result["window_s"] = round((end_ms - t0) / 1000, 1)
                result["replicas"] = {r.name: await replica_figures(r, http) for r in run.replicas}
        finally:
            for replica in run.replicas:
                await replica.stop()
            await redis.stop()
            await fake.stop()
    return result


async def bench(opts: argparse.Namespace) -> dict[str, Any]:
    load_before = loadavg()
    if opts.platform == "lark":
        result = await bench_lark(opts)
    else:
        result = await bench_platform(opts, replica_config, replica_figures)
    result["targets"] = judge(result, opts.turn_seconds)
    result["config"] = {
        "platform": opts.platform,
        "replicas": opts.replicas,
        "turns": opts.turns,
        "arrival_s": opts.arrival_seconds,
        "turn_s": opts.turn_seconds,
        "update_interval_ms": opts.update_interval_ms,
        "chats": opts.chats or "one per turn",
        "card_mode": opts.card_mode,
        "limits": "off (recorded only)" if opts.no_limits else "on",
        "refused_calls_count": opts.count_refused,
    }
    result["loadavg_before"], result["loadavg_after"] = load_before, loadavg()
    return result


# Issue 38's scenarios (3 replicas x 300 turns arriving over 15 s): what a bare run measures.
SCENARIOS = {
    "lark-15": ("lark", 15.0),
    "lark-48": ("lark", 48.0),
    "dingtalk-15": ("dingtalk", 15.0),
    "wecom-15": ("wecom", 15.0),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--platform", choices=["lark", "dingtalk", "wecom"], default=None,
        help="one run on this platform (default: every scenario of --scenarios)",
    )  # fmt: skip
    p.add_argument(
        "--scenarios", default=",".join(SCENARIOS),
        help=f"comma-separated, run in turn without --platform: {', '.join(SCENARIOS)}",
    )  # fmt: skip
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--turns", type=int, default=300)
    p.add_argument("--arrival-seconds", type=float, default=15.0)
    p.add_argument("--turn-seconds", type=float, default=15.0)
    p.add_argument("--update-interval-ms", type=int, default=1000)
    p.add_argument("--chats", type=int, default=0, help="shared group chats (0: one per turn)")
    p.add_argument("--card-mode", choices=["patch", "cardkit"], default="patch")
    p.add_argument("--no-limits", action="store_true", help="the fake records, refuses nothing")
    p.add_argument(
        "--count-refused", action="store_true", help="refused calls count against the limits"
    )
    p.add_argument("--deadline-s", type=float, default=None, help="for every final state")
    p.add_argument("--json-only", action="store_true", help="nothing but the JSON line")
    opts = p.parse_args(argv)
    if opts.replicas < 1 or opts.turns < 1 or opts.turn_seconds <= 0:
        p.error("--replicas, --turns and --turn-seconds must be positive")
    unknown = set(opts.scenarios.split(",")) - set(SCENARIOS)
    if unknown:
        p.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    return opts


def runs(opts: argparse.Namespace) -> list[tuple[str, argparse.Namespace]]:
    """(name, options) of each run: the one ``--platform`` names, or each scenario."""
    if opts.platform is not None:
        return [(f"{opts.platform}-{opts.turn_seconds:g}", opts)]
    out = []
    for name in opts.scenarios.split(","):
        platform, turn_s = SCENARIOS[name]
        out.append((name, argparse.Namespace(**{**vars(opts), "platform": platform,
                                                "turn_seconds": turn_s})))  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    global OPTS
    OPTS = opts = parse_args(argv)
    met = {}
    for name, one in runs(opts):
        if one.deadline_s is None:
            one.deadline_s = one.arrival_seconds + one.turn_seconds + max(120, one.turns / 10)
        log(f"{name}: {one.replicas} replicas, {one.turns} turns of {one.turn_seconds:g} s")
        result = asyncio.run(bench(one))
        result["scenario"] = name
        met[name] = result["targets"]["all_met"]
        log(
            f"{name}: calls {result['calls']} ({result['calls_per_turn']}/turn), throttled "
            f"{result['throttled']}, finals {result['finals_delivered']}/{result['turns']}, "
            f"final p99 {result['final_after_turn_end_ms']['p99']} ms after the turn's end, "
            f"targets met: {met[name]}"
        )
        print(json.dumps(result, separators=(",", ":")), flush=True)
    if len(met) > 1:
        print(json.dumps({"scenarios_met": met, "all_met": all(met.values())}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
