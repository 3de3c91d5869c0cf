"""Reading the due index: which conversations are due now, per shard, and when each shard is
next due (``SessionStore.due_in``; the flushers ask)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from redis.commands.core import AsyncScript

from sessions.autopipe import ScriptPipe
from sessions.keys import KeyBuilder


async def peek_due(
    pipe: ScriptPipe,
    script: AsyncScript,
    keys: KeyBuilder,
    now_ms: int,
    limit: int,
    shards: Iterable[int] | None,
) -> tuple[list[str], dict[int, int | None]]:
    """Up to ``limit`` conversations due now (soonest first) in ``shards`` (all: None), and per
    shard read when something is next due there (None: nothing); one due_peek.lua call per
    shard through the auto-pipeline."""
    read = sorted(range(keys.shards) if shards is None else set(shards))
    per_shard = min(limit, max(4, -(-2 * limit // len(read)))) if read else 0
    if not read:
        return [], {}
    due_key = keys.due
    calls = [pipe.submit(script, [due_key(shard)], [per_shard]) for shard in read]
    rows: list[list[str]] = await asyncio.gather(*calls)
    due: list[tuple[float, str]] = []
    soonest: dict[int, int | None] = {}
    for shard, flat in zip(read, rows, strict=True):
        soonest[shard] = None
        for i in range(0, len(flat), 2):
            member, score = flat[i], float(flat[i + 1])
            if score > now_ms:
                soonest[shard] = int(score)
                break
            due.append((score, member))
        else:
            if len(flat) == 2 * per_shard:
                soonest[shard] = now_ms
    due.sort()
    return [member for _score, member in due[:limit]], soonest
