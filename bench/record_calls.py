"""What an adapter's record costs the daemon: CPU per ``RecordStore`` call through redis-py's
client and through the session store's auto-pipeline (sessions/records.py, issue 27).

A Lark turn makes about ten record calls (its card as last rendered after every PATCH, the typing
reaction's id put, read and deleted, the callback mark read at the final PATCH, the sender's email
looked up); with the echo expert answering 200 chats while webhooks come in
(``lark_ingest.py --answering``) they ran alongside intake. This bench makes the card-update pair
(put a 1.6 KB card, get a record) from ``--concurrency`` callers at once, each waiting for its
reply, through both paths in turn on one core; CPU is this process's own (``time.process_time``),
per call. Rounds interleave the two; the JSON has every round and the medians.

Usage: python bench/record_calls.py [--calls 20000] [--concurrency 64] [--rounds 3]
Prints ONE JSON line. Runs a private redis-server; nothing is left behind.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chaos_redis import StandaloneRedis

from sessions import KeyBuilder, RecordStore, SessionStore
from sessions.connection import connect_redis

CARD = json.dumps(
    {"schema": "2.0", "body": {"elements": [{"tag": "markdown", "content": "x" * 1600}]}}
)


async def one(url: str, workdir: Path, piped: bool, calls: int, concurrency: int) -> float:
    handle = await connect_redis(url, data_dir=workdir)  # the daemon's client, its pool size
    client = handle.client
    keys = KeyBuilder(prefix="recbench")
    store = SessionStore(client=client, keys=keys)
    await store.prepare()
    records = RecordStore(client=client, keys=keys, pipe=store.pipe if piped else None)
    each = max(1, calls // (2 * concurrency))

    async def caller(c: int) -> None:
        for i in range(each):
            await records.put("lark:card", f"om_{c}_{i % 50}", CARD, ttl_ms=60_000)
            await records.get("lark:answered", f"om_{c}_{i % 50}")

    try:
        await asyncio.gather(*(caller(c) for c in range(8)))  # warm: connections, scripts
        began = time.process_time()
        await asyncio.gather(*(caller(c) for c in range(concurrency)))
        return (time.process_time() - began) * 1e6 / (2 * each * concurrency)
    finally:
        await store.close()
        await handle.close()


async def main(calls: int, concurrency: int, rounds: int) -> dict[str, object]:
    out: dict[str, list[float]] = {"client": [], "pipe": []}
    with tempfile.TemporaryDirectory(prefix="xgw-records-") as tmp:
        server = StandaloneRedis(Path(tmp))
        await server.start()
        try:
            for _ in range(rounds):
                out["client"].append(
                    round(await one(server.url, Path(tmp), False, calls, concurrency), 2)
                )
                out["pipe"].append(
                    round(await one(server.url, Path(tmp), True, calls, concurrency), 2)
                )
        finally:
            await server.stop()
    return {
        "cpu_us_per_call": {k: statistics.median(v) for k, v in out.items()},
        "rounds_cpu_us_per_call": out,
        "calls": calls,
        "concurrency": concurrency,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    a = parser.parse_args()
    print(json.dumps(uvloop.run(main(a.calls, a.concurrency, a.rounds))))
