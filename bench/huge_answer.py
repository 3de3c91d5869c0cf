"""A huge answer streamed in small deltas while webhooks keep coming (issue 38, items 1, 3-4).

The daemon runs in this process (tests.support.helpers.InProcessGateway) against the fake Lark
OpenAPI (tests/fakes/lark.py) and the Redis at ``--redis-url`` under a fresh key prefix (deleted
on the way out). ``wrk`` posts signed Lark webhooks (each a short turn in one of 200 group chats)
for ``--duration`` seconds three times: alone (the baseline); while one chat's turn streams a
``--mb`` MB answer in ``--chunk``-character deltas (the echo expert, ``[repeat N]``); and
(``--cited-kb``, 0: not run) while an XpertAI answer of that many KB citing its sources all along
streams in 4-character chunks from the fake XpertAI (tests/fakes/xpertai.py, ``[kb] [cite N]``),
each citation rendered as it arrives (gateway/citations.py). Three loop probes:

- ``wall``: a task sleeping ``--probe-ms`` at a time, how late it wakes;
- ``held_cpu``: how much of that lateness the loop's thread spent on the CPU (a busy machine
  that takes the core away is not counted, but the backlog of short steps it leaves is);
- ``step``: the CPU each single step of the loop took (``asyncio.Handle._run`` timed): the
  longest (``max_cpu_ms``), the longest in which no full garbage collection ran
  (``max_cpu_ms_without_full_gc``: CPython collects the whole heap, the fakes' records
  included, inside whichever step allocates), how many went over 50 ms, the three longest by
  name, and the full collections' own CPU (``full_gc_cpu_ms``).

Prints ONE JSON line: baseline, huge, cited: {webhook (wrk: events_s, latency p50/p99 ms,
non_2xx, cpu_ms_per_event, server_cores), loop_stall_ms {wall, held_cpu: {p99, max}, step},
answer_s (the webhook to the file message, or to the cited card's Done)}; huge also file (its
name and bytes as the fake Lark got it) and parts (text messages besides the card).

CPU is this process's (/proc), which also holds the fakes: their share (parsing the cards, the
2 MB upload, making the XpertAI frames) is in the figures, so compare the phases of one run, not
with other benches.

Usage: python bench/huge_answer.py [--mb 2] [--chunk 4] [--duration 8] [--connections 2]
       [--cited-kb 512]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from aiohttp import web
from wrk_support import ensure_wrk, run_wrk, write_payloads

from tests.fakes.lark import FakeLark
from tests.fakes.xpertai import FakeXpertAI
from tests.support.helpers import InProcessGateway, free_port
from tests.support.lark import (
    LarkHarness,
    lark_integration,
    message_event,
    reply_to,
)
from tests.support.xpert import xpert_expert

LINE = "y" * 200
LINES = 50  # the message: 50 lines of 200 characters, about 10 KB; the echo quotes each
# the fake XpertAI's "[kb]" answer with its two citations and 20 plain sentences, written raw
CITED_REPEAT_CHARS = 780


class LoopProbe:
    """How late a task sleeping ``interval`` s wakes: the longest the loop was held."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.late: list[float] = []
        self.held: list[float] = []
        self._task: asyncio.Task[None] | None = None
        self.steps = StepProbe()
        self.steps.stop()

    async def _run(self) -> None:
        while True:
            began, cpu = time.perf_counter(), time.thread_time()
            await asyncio.sleep(self.interval)
            late = max(0.0, time.perf_counter() - began - self.interval)
            self.late.append(late)
            # The part of the delay the loop's own thread spent running: a stall this process
            # caused, not one the machine's other processes did by taking the core.
            self.held.append(min(late, time.thread_time() - cpu))

    def start(self) -> None:
        self.late.clear()
        self.held.clear()
        self.steps = StepProbe()
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> dict[str, Any]:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        steps = self.steps.stop()
        return {"wall": _quantiles(self.late), "held_cpu": _quantiles(self.held), "step": steps}


class StepProbe:
    """The CPU each step of the loop (one callback or one task step) took on its own, timed
    around ``asyncio.Handle._run``: the longest one step held the loop, whatever the machine's
    other processes did (a probe's lateness also counts the backlog of short steps a
    descheduled process then runs). Reports the longest, the number over 50 ms and what the
    three longest were."""

    original = asyncio.events.Handle._run

    def __init__(self) -> None:
        self.longest: list[tuple[float, str]] = []
        self.over = 0
        self.count = 0
        self.own = 0.0  # the longest step in which no full garbage collection ran
        probe = self

        def timed(handle: asyncio.events.Handle) -> None:
            began, collections = time.thread_time(), len(probe.gc)
            StepProbe.original(handle)
            took = time.thread_time() - began
            probe.count += 1
            if took > 0.05:
                probe.over += 1
            if collections == len(probe.gc):  # no full collection ran in this step
                probe.own = max(probe.own, took)
            if len(probe.longest) < 3 or took > probe.longest[-1][0]:
                probe.longest = sorted([*probe.longest, (took, repr(handle)[:160])])[::-1][:3]

        asyncio.events.Handle._run = timed  # type: ignore[method-assign]
        self.gc: list[float] = []  # the CPU of each full (generation 2) garbage collection
        self._gc_began = 0.0
        gc.callbacks.append(self._collected)

    def _collected(self, phase: str, info: dict[str, int]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._gc_began = time.thread_time()
        else:
            self.gc.append(time.thread_time() - self._gc_began)

    def stop(self) -> dict[str, Any]:
        asyncio.events.Handle._run = StepProbe.original  # type: ignore[method-assign]
        if self._collected in gc.callbacks:
            gc.callbacks.remove(self._collected)
        return {
            "max_cpu_ms": round(self.longest[0][0] * 1000, 1) if self.longest else 0.0,
            "max_cpu_ms_without_full_gc": round(self.own * 1000, 1),
            "over_50ms": self.over,
            "steps": self.count,
            "longest": [f"{round(t * 1000, 1)} ms {name}" for t, name in self.longest],
            # a step that ran a full collection took that much longer: Python's, not ours
            "full_gc_cpu_ms": sorted((round(t * 1000, 1) for t in self.gc), reverse=True)[:5],
        }


def _quantiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values) or [0.0]
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return {"p99": round(p99 * 1000, 1), "max": round(ordered[-1] * 1000, 1)}


def webhook(res: dict[str, Any]) -> dict[str, Any]:
    keep = ("events_s", "non_2xx", "cpu_ms_per_event", "server_cores", "latency_ms", "errors")
    return {k: v for k, v in res.items() if k in keep or k.startswith("p")}


async def loaded(
    args: argparse.Namespace,
    fake: FakeLark,
    lark: LarkHarness,
    url: str,
    probe: LoopProbe,
    text: str | None,
    message_id: str,
    arrived: Callable[[], bool],
) -> dict[str, Any]:
    """``wrk`` for ``--duration`` s, and (``text``) one message of ``message_id`` meanwhile:
    the webhooks' figures, the loop's stalls and the seconds until ``arrived``."""
    with tempfile.TemporaryDirectory() as tmp:
        events = Path(tmp) / "events.tsv"
        await asyncio.to_thread(write_payloads, events, int(args.duration * 4000), fake.receive)
        probe.start()
        began = time.perf_counter()
        load = asyncio.create_task(
            run_wrk(
                url,
                events,
                duration=args.duration,
                connections=args.connections,
                pids=[os.getpid()],
                redis_url=None,
            )
        )
        answer_s = None
        if text is not None:
            chat = "oc_" + message_id.removeprefix("om_")
            await lark.post(message_event(text, chat_id=chat, message_id=message_id))
            while time.perf_counter() - began < 300:
                if arrived():
                    answer_s = round(time.perf_counter() - began, 2)
                    break
                await asyncio.sleep(0.05)
        res = await load
        out = {"webhook": webhook(res), "loop_stall_ms": await probe.stop()}
        if text is not None:
            out["answer_s"] = answer_s
        return out


def filed(fake: FakeLark, message_id: str) -> dict[str, Any] | None:
    for m in reply_to(fake, message_id):
        if fake.messages[m]["msg_type"] == "file":
            return fake.messages[m]
    return None


def base_config(args: argparse.Namespace, prefix: str) -> dict[str, Any]:
    return {
        "redis": {"url": args.redis_url, "keyPrefix": prefix},
        "logging": {"level": "error", "format": "json"},
        "runtime": {"leaseSeconds": 5, "pollIntervalMs": 50, "shutdownGraceSeconds": 1},
        "archive": {"enabled": False},
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    if ensure_wrk() is None:
        raise SystemExit("wrk is needed (apt-get install wrk)")
    prefix = f"bench-huge-{uuid.uuid4().hex[:8]}"
    fake = FakeLark()
    await fake.start()
    echo = {"id": "echo", "kind": "echo", "stepDelayMs": 0, "charDelayMs": 0}
    config = base_config(args, prefix) | {
        "experts": [echo | {"chunkChars": args.chunk}],
        "integrations": [lark_integration(fake, updateIntervalMs=500, maxWindowSeconds=0)],
    }
    gw = InProcessGateway(config)
    await gw.start()
    lark = LarkHarness(fake, gw)
    url = f"http://127.0.0.1:{gw.port}/api/lark/webhook/lark-main"
    probe = LoopProbe(args.probe_ms / 1000)
    out: dict[str, Any] = {"mb": args.mb, "chunk_chars": args.chunk}
    try:
        out["baseline"] = await loaded(args, fake, lark, url, probe, None, "", lambda: True)
        await gw.idle(60)
        times = max(1, round(args.mb * 1_000_000 / (LINES * (len(LINE) + 3))))
        text = "\n".join([LINE] * LINES) + f" [repeat {times}]"
        out["huge"] = await loaded(
            args,
            fake,
            lark,
            url,
            probe,
            text,
            "om_huge",
            lambda: filed(fake, "om_huge") is not None,
        )
        message = filed(fake, "om_huge")
        key = json.loads(message["content"])["file_key"] if message else None
        upload = fake.files.get(key) if key else None
        out["huge"]["file"] = (
            None if upload is None else {"name": upload[2], "bytes": len(upload[0])}
        )
        out["huge"]["parts"] = sum(
            1 for m in reply_to(fake, "om_huge") if fake.messages[m]["msg_type"] == "text"
        )
        await gw.idle(60)
    finally:
        await lark.close()
    if args.cited_kb > 0:
        try:
            out["cited"] = await cited(args, fake, prefix + "-cited")
        finally:
            await fake.stop()
    else:
        await fake.stop()
    redis = aioredis.from_url(args.redis_url)
    async for k in redis.scan_iter(match=f"{prefix}*", count=1000):
        await redis.delete(k)
    await redis.aclose()
    return out


async def cited(args: argparse.Namespace, fake: FakeLark, prefix: str) -> dict[str, Any]:
    """An XpertAI answer of ``--cited-kb`` KB citing its sources all along, streamed in
    4-character chunks by the fake XpertAI (``[kb] [cite N]``), each citation link rendered as
    it arrives (gateway/citations.py), while the webhooks keep coming."""
    xpert = FakeXpertAI(keepalive_s=1.0)
    runner = web.AppRunner(xpert.app())
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    expert = xpert_expert(f"http://127.0.0.1:{port}/api/ai")
    config = base_config(args, prefix) | {
        "experts": [expert],
        "integrations": [
            lark_integration(fake, xpertId="sales", updateIntervalMs=500, maxWindowSeconds=0)
        ],
    }
    gw = InProcessGateway(config)
    await gw.start()
    lark = LarkHarness(fake, gw)
    url = f"http://127.0.0.1:{gw.port}/api/lark/webhook/lark-main"
    repeat = max(1, round(args.cited_kb * 1000 / CITED_REPEAT_CHARS))

    def done() -> bool:  # the card says Done (the answer's parts follow it)
        replies = reply_to(fake, "om_cited")
        return bool(replies) and fake.card_of(replies[0])["header"]["title"]["content"] == "Done"

    try:
        out = await loaded(
            args,
            fake,
            lark,
            url,
            LoopProbe(args.probe_ms / 1000),
            f"what about refunds? [kb] [cite {repeat}]",
            "om_cited",
            done,
        )
        replies = reply_to(fake, "om_cited")
        kinds = [fake.messages[m]["msg_type"] for m in replies]
        out |= {"kb": args.cited_kb, "parts": kinds.count("text"), "file": "file" in kinds}
        await gw.idle(60)
        return out
    finally:
        await lark.close()
        await runner.cleanup()
        redis = aioredis.from_url(args.redis_url)
        async for k in redis.scan_iter(match=f"{prefix}*", count=1000):
            await redis.delete(k)
        await redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=2.0)
    parser.add_argument("--chunk", type=int, default=4)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--connections", type=int, default=2)
    parser.add_argument("--probe-ms", type=float, default=5.0)
    parser.add_argument(
        "--cited-kb", type=float, default=512, help="the XpertAI answer with citations (0: none)"
    )
    parser.add_argument(
        "--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    print(json.dumps(asyncio.run(run(parser.parse_args()))))


if __name__ == "__main__":
    main()
