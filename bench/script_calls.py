"""What one script call costs the daemon: CPU per call through the auto-pipeline (sessions/
autopipe.py), the way every call of a turn goes to Redis.

An echo turn makes about seven script calls (intake with its claim, the context read, the audit
record, the finish, and the console's two transcript writes: ``pipeline.py``'s MONITOR count),
so their cost is a floor under issue 15's CPU per turn whatever the turn's own code does. This
bench times calls of a script that does no work (it returns one key and one argument), with the
shape of an intake call (ten keys on one slot, eight arguments, one of them a 600-byte
envelope), made one at a time (each waits for its reply: a lone turn) and eight at a time (the
auto-pipeline sends them in one write: eight conversations' turns at once, as
``instructions.py turn`` and ``pipeline.py`` run them). CPU is this process's own
(``time.process_time``: user + system, the socket writes and reads included); the Redis
server's is not in it.

Rounds interleave the two, and the JSON has the median of each with every round's figure.

Usage: python bench/script_calls.py [--calls 4000] [--rounds 5]
Prints ONE JSON line. Uses $REDIS_URL (default redis://127.0.0.1:6379/0); the script reads no
key, so nothing is left behind.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sessions.autopipe import ScriptPipe

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
LEVELS = (1, 8)


async def one_round(pipe: ScriptPipe, script: Any, calls: int, level: int) -> dict[str, float]:
    tag = uuid.uuid4().hex[:8]
    keys = [f"xgwbench:{{{tag}}}:{part}" for part in range(10)]
    args = ["e" * 600, 1, 0, 0, 86_400_000, 86_400_000, f"console:{tag}", "collect"]

    async def worker(n: int) -> None:
        for _ in range(n):
            await pipe.evalsha(script, keys, args)

    per = calls // level
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker(per) for _ in range(level)))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    done = per * level
    return {"cpu_us": round(cpu / done * 1e6, 1), "wall_us": round(wall / done * 1e6, 1)}


async def run(calls: int, rounds: int) -> dict[str, Any]:
    client = aioredis.Redis.from_url(REDIS_URL)
    script = client.register_script("return {KEYS[1], ARGV[2]}")
    pipe = ScriptPipe(client, name="bench-script-calls")
    try:
        for level in LEVELS:  # warm-up: the script loaded, the connection open
            await one_round(pipe, script, 400, level)
        runs: dict[int, list[dict[str, float]]] = {level: [] for level in LEVELS}
        for _ in range(rounds):
            for level in LEVELS:
                runs[level].append(await one_round(pipe, script, calls, level))
        writes, sent = pipe.stats.writes, pipe.stats.calls
    finally:
        await pipe.close()
        await client.aclose()
    out: dict[str, Any] = {"calls_per_round": calls, "rounds": rounds}
    for level, rs in runs.items():
        out[f"at_once_{level}"] = {
            "cpu_us_per_call": statistics.median(r["cpu_us"] for r in rs),
            "wall_us_per_call": statistics.median(r["wall_us"] for r in rs),
            "rounds_cpu_us_per_call": [r["cpu_us"] for r in rs],
        }
    out["calls_per_write"] = round(sent / max(writes, 1), 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import uvloop  # the daemon's loop

    print(json.dumps(uvloop.run(run(args.calls, args.rounds))), flush=True)


if __name__ == "__main__":
    main()
