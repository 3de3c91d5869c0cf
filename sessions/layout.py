"""The key layout under a prefix, checked once at start: every replica must build the same keys.

Layout 2 (``sessions.keys``) puts a conversation's keys under its due shard's hash tag, and the
number of shards (``runtime.dueShards``) decides which shard that is: two replicas with different
counts would each see their own half of every conversation (double turns, lost dedup). The first
replica records ``{"layout": 2, "dueShards": N}`` under ``<prefix>:layout``; a replica that
disagrees does not start.

Layout 1 (up to 0.1) tagged each key with its conversation (``<prefix>:{<conversation>}:burst``)
and kept one due index, ``<prefix>:due``. The first layout-2 replica on a single server (layout 1
never ran on a cluster) renames those keys once: bindings keep their sessions, queued messages
and running turns carry on. Stop every replica of the old version first: one still running
would keep writing the old keys.
"""

from __future__ import annotations

import json
from typing import Any, cast

import structlog
from redis.asyncio.cluster import RedisCluster

from sessions.connection import RedisClient, RedisStartupError
from sessions.keys import KeyBuilder

log = structlog.get_logger("sessions.layout")

LAYOUT = 2
_CONV_PARTS = ("dedup", "burst", "burstmeta", "turn", "lease", "binding", "cancel")


class LayoutMismatch(RedisStartupError):
    """The data under this key prefix was laid out by replicas configured differently."""


async def ensure_layout(client: RedisClient, keys: KeyBuilder) -> None:
    """Record this layout, or check the recorded one; upgrade layout-1 keys the first time."""
    mine = {"layout": LAYOUT, "dueShards": keys.shards}
    created = await client.set(keys.layout(), json.dumps(mine), nx=True)
    if not created:
        raw = await client.get(keys.layout())
        theirs: dict[str, Any] = json.loads(raw) if raw else {}
        if theirs != mine:
            raise LayoutMismatch(
                f"runtime.dueShards is {keys.shards}, but the data under keyPrefix "
                f"{keys.prefix!r} is laid out for {theirs.get('dueShards')} due shards "
                f"(layout {theirs.get('layout')}): every replica must use the same value; "
                "to change it, start on a new keyPrefix"
            )
        return
    if not isinstance(client, RedisCluster):
        moved = await upgrade_layout_1(client, keys)
        if moved:
            log.warning("keys of the previous layout moved to the sharded one", keys=moved)


def _new_name(keys: KeyBuilder, old: str) -> str | None:
    """The layout-2 name of a layout-1 key, or None for anything else."""
    head = keys.prefix + keys.sep + "{"
    if not old.startswith(head) or "}" not in old:
        return None
    tag, _, rest = old[len(head) :].partition("}" + keys.sep)
    if "|" not in tag or not rest:  # a layout-2 tag is "<shard>.<n>": never a "|"
        return None
    part, _, tail = rest.partition(keys.sep)
    if tag.startswith("tl|"):
        integration, _, chat = tag[3:].partition("|")
        if rest == "msgs":
            return keys.timeline_messages(integration, chat)
        if rest == "order":
            return keys.timeline_order(integration, chat)
        return None
    if part not in _CONV_PARTS:
        return None
    name = keys._conv(tag, part)
    return name + keys.sep + tail if tail else name


async def upgrade_layout_1(client: RedisClient, keys: KeyBuilder) -> int:
    """Rename every layout-1 key of ``keys.prefix`` and move its due index; how many keys."""
    moved = 0
    async for old in client.scan_iter(match=f"{keys.prefix}{keys.sep}{{*", count=1000):
        new = _new_name(keys, old)
        # RENAMENX: a key a new replica already wrote wins over the old one.
        if new is not None and not await client.renamenx(old, new):
            await client.delete(old)
        moved += new is not None
    old_due = keys.prefix + keys.sep + "due"
    entries = cast(list[tuple[str, float]], await client.zrange(old_due, 0, -1, withscores=True))
    for member, score in entries:
        # LT adds a new member, and keeps the sooner time of one a new replica scheduled.
        await client.zadd(keys.due_of(member), {member: score}, lt=True)
    if entries:
        await client.delete(old_due)
    return moved + bool(entries)
