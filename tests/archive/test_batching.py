"""The archiver gathers: entries that reach the outbox while it waits its poll interval go into
the database together, not a transaction each (a batch per turn cost a transaction, and on
SQLite an fsync, per turn: 2.6 ms more CPU a turn at 200 turns/s). A real daemon in process, a
real Redis and the archive database (PostgreSQL and SQLite); the entries are queued the way
``outbox_add.lua`` queues them."""

from __future__ import annotations

import asyncio
import json
import math
import threading
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from gateway.archive.schema import memory_changes
from sessions import KeyBuilder
from tests.support.archive import archive_config, rows
from tests.support.helpers import Gateways
from tests.support.metrics import Scrape, scrape
from tests.support.waits import eventually

TRICKLE = 1200


def change(n: int) -> dict[str, str]:
    body = {
        "integrationId": "console",
        "chatId": "team",
        "action": "remember",
        "by": "alice",
        "item": {"text": f"fact {n}"},
        "at": 1_700_000_000_000 + n,
    }
    return {"kind": "memory", "id": f"change-{n}", "body": json.dumps(body)}


async def test_entries_trickling_in_are_gathered_into_few_transactions(
    archive_url: str, prefix: str, gateways: Gateways, redis_client: aioredis.Redis
) -> None:
    gw = await gateways(archive_config(prefix, archive_url))
    base = f"http://127.0.0.1:{gw.port}"
    outbox = KeyBuilder(prefix=prefix).audit_outbox("console")

    async def written(count: int) -> Scrape | None:
        s = await scrape(base)
        return s if s.value("xgw_archive_written_total") >= count else None

    await redis_client.xadd(outbox, change(0))  # type: ignore[arg-type]
    first = await eventually(lambda: written(1), timeout=20)
    assert first.value("xgw_archive_batches_total") == 1
    # An entry a millisecond or so (a busy gateway's turns) for over a second, while it archives.
    loop = asyncio.get_running_loop()
    began = loop.time()
    for n in range(1, TRICKLE + 1):
        await redis_client.xadd(outbox, change(n))  # type: ignore[arg-type]
        await asyncio.sleep(0.001)
    span = loop.time() - began

    s = await eventually(lambda: written(TRICKLE + 1), timeout=20)
    assert s.value("xgw_archive_written_total") == TRICKLE + 1
    # A transaction per poll interval (0.5 s) the trickle lasted, give or take one, and one
    # per full batch (archive.batchSize, 200): 7-8 here. Not about one per entry, which taking
    # the outbox again at once after each batch came to (about 300 here).
    batches = s.value("xgw_archive_batches_total") - 1
    assert 1 <= batches <= math.ceil(TRICKLE / 200) + math.floor(span / 0.5) + 1, (batches, span)
    found: list[dict[str, Any]] = await rows(archive_url, memory_changes)
    assert sorted(r["text"] for r in found) == sorted(f"fact {n}" for n in range(TRICKLE + 1))
    assert await redis_client.xlen(outbox) == 0


async def test_postgresql_batches_are_written_on_a_thread_that_ends_with_the_gateway(
    pg_url: str, prefix: str, gateways: Gateways, redis_client: aioredis.Redis
) -> None:
    """On PostgreSQL the writes run on a loop of their own (gateway/archive/offloop.py), so a
    batch's statements never hold the replica's event loop; the thread starts when the archiver
    takes its lease, and a stopped gateway leaves none. (SQLite's statements already run in
    aiosqlite's thread: no second one.)"""
    gw = await gateways(archive_config(prefix, pg_url))
    base = f"http://127.0.0.1:{gw.port}"
    outbox = KeyBuilder(prefix=prefix).audit_outbox("console")
    service = gw.gateway.archive
    assert service is not None and service.writer is not None
    writer = service.writer
    # Started (and connected) when the archiver took the lease, before any batch.
    await eventually(lambda: writer.running, timeout=20)
    await redis_client.xadd(outbox, change(0))  # type: ignore[arg-type]

    async def written() -> bool:
        return (await scrape(base)).value("xgw_archive_written_total") == 1

    await eventually(written, timeout=20)
    [thread] = [t for t in threading.enumerate() if t is writer.thread]
    assert thread.name == "archive-writer" and thread is not threading.current_thread()
    assert [r["text"] for r in await rows(pg_url, memory_changes)] == ["fact 0"]
    await gw.stop()
    gateways.started.remove(gw)
    assert not thread.is_alive() and not writer.running


async def test_sqlite_batches_are_written_from_the_replicas_loop(
    tmp_path: Path, prefix: str, gateways: Gateways
) -> None:
    gw = await gateways(archive_config(prefix, f"sqlite:///{tmp_path / 'a.sqlite3'}"))
    assert gw.gateway.archive is not None and gw.gateway.archive.writer is None
