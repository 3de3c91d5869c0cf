"""A huge answer streamed in small deltas while webhooks keep coming (issue 38, items 3-4).

The daemon runs in this process (tests.support.helpers.InProcessGateway) against the fake Lark
OpenAPI (tests/fakes/lark.py) and the Redis at ``--redis-url`` under a fresh key prefix (deleted
on the way out). ``wrk`` posts signed Lark webhooks (each a short turn in one of 200 group chats)
for ``--duration`` seconds twice: first alone (the baseline), then while one chat's turn streams
a ``--mb`` MB answer in ``--chunk``-character deltas (the echo expert, ``[repeat N]``). A probe
task sleeps ``--probe-ms`` at a time and records how late it wakes (``wall``) and how much of
that delay the loop's thread spent on the CPU (``held_cpu``: a stall this process caused, not
one a busy machine caused by taking the core away). Prints ONE JSON line:

  baseline, huge: {webhook (wrk: events_s, latency p50/p99 ms, non_2xx, cpu_ms_per_event,
  server_cores), loop_stall_ms {wall, held_cpu: {p99, max}}}; huge also answer_s (the webhook
  to the file message), file (its name and bytes as the fake Lark got it), parts (text messages
  sent besides the card)

CPU is this process's (/proc), which also holds the fake Lark: its share (parsing the cards and
the 2 MB upload) is in the figures, so compare the two phases of one run, not with other benches.

Usage: python bench/huge_answer.py [--mb 2] [--chunk 4] [--duration 8] [--connections 2]
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

import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from wrk_support import ensure_wrk, run_wrk, write_payloads

from tests.fakes.lark import FakeLark
from tests.support.helpers import InProcessGateway
from tests.support.lark import (
    LarkHarness,
    lark_integration,
    message_event,
    reply_to,
)

LINE = "y" * 200
LINES = 50  # the message: 50 lines of 200 characters, about 10 KB; the echo quotes each


class LoopProbe:
    """How late a task sleeping ``interval`` s wakes: the longest the loop was held."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.late: list[float] = []
        self.held: list[float] = []
        self._task: asyncio.Task[None] | None = None

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
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> dict[str, dict[str, float]]:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        return {"wall": _quantiles(self.late), "held_cpu": _quantiles(self.held)}


def _quantiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values) or [0.0]
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return {"p99": round(p99 * 1000, 1), "max": round(ordered[-1] * 1000, 1)}


def webhook(res: dict[str, Any]) -> dict[str, Any]:
    keep = ("events_s", "non_2xx", "cpu_ms_per_event", "server_cores", "latency_ms", "errors")
    return {k: v for k, v in res.items() if k in keep or k.startswith("p")}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    if ensure_wrk() is None:
        raise SystemExit("wrk is needed (apt-get install wrk)")
    prefix = f"bench-huge-{uuid.uuid4().hex[:8]}"
    fake = FakeLark()
    await fake.start()
    config = {
        "redis": {"url": args.redis_url, "keyPrefix": prefix},
        "logging": {"level": "error", "format": "json"},
        "runtime": {"leaseSeconds": 5, "pollIntervalMs": 50, "shutdownGraceSeconds": 1},
        "experts": [
            {
                "id": "echo",
                "kind": "echo",
                "stepDelayMs": 0,
                "charDelayMs": 0,
                "chunkChars": args.chunk,
            }
        ],
        "integrations": [lark_integration(fake, updateIntervalMs=500, maxWindowSeconds=0)],
    }
    gw = InProcessGateway(config)
    await gw.start()
    lark = LarkHarness(fake, gw)
    url = f"http://127.0.0.1:{gw.port}/api/lark/webhook/lark-main"
    probe = LoopProbe(args.probe_ms / 1000)
    pid = [os.getpid()]
    out: dict[str, Any] = {"mb": args.mb, "chunk_chars": args.chunk}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            events = Path(tmp) / "events.tsv"
            need = int(args.duration * 4000)
            await asyncio.to_thread(write_payloads, events, need, fake.receive)
            probe.start()
            base = await run_wrk(
                url,
                events,
                duration=args.duration,
                connections=args.connections,
                pids=pid,
                redis_url=None,
            )
            out["baseline"] = {"webhook": webhook(base), "loop_stall_ms": await probe.stop()}
            await gw.idle(60)

            await asyncio.to_thread(write_payloads, events, need, fake.receive)
            times = max(1, round(args.mb * 1_000_000 / (LINES * (len(LINE) + 3))))
            text = "\n".join([LINE] * LINES) + f" [repeat {times}]"
            probe.start()
            began = time.perf_counter()
            load = asyncio.create_task(
                run_wrk(
                    url,
                    events,
                    duration=args.duration,
                    connections=args.connections,
                    pids=pid,
                    redis_url=None,
                )
            )
            await lark.post(message_event(text, chat_id="oc_huge", message_id="om_huge"))
            answer_s = None

            def filed() -> dict[str, Any] | None:
                for m in reply_to(fake, "om_huge"):
                    if fake.messages[m]["msg_type"] == "file":
                        return fake.messages[m]
                return None

            while time.perf_counter() - began < 300:
                if filed() is not None:
                    answer_s = round(time.perf_counter() - began, 2)
                    break
                await asyncio.sleep(0.05)
            huge = await load
            stall = await probe.stop()
            message = filed()
            key = json.loads(message["content"])["file_key"] if message else None
            upload = fake.files.get(key) if key else None
            out["huge"] = {
                "webhook": webhook(huge),
                "loop_stall_ms": stall,
                "answer_s": answer_s,
                "file": None if upload is None else {"name": upload[2], "bytes": len(upload[0])},
                "parts": sum(
                    1 for m in reply_to(fake, "om_huge") if fake.messages[m]["msg_type"] == "text"
                ),
            }
            await gw.idle(60)
    finally:
        await lark.close()
        await fake.stop()
        redis = aioredis.from_url(args.redis_url)
        async for k in redis.scan_iter(match=f"{prefix}*", count=1000):
            await redis.delete(k)
        await redis.aclose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=2.0)
    parser.add_argument("--chunk", type=int, default=4)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--connections", type=int, default=2)
    parser.add_argument("--probe-ms", type=float, default=5.0)
    parser.add_argument(
        "--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    print(json.dumps(asyncio.run(run(parser.parse_args()))))


if __name__ == "__main__":
    main()
