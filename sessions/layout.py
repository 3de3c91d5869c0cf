"""The key layout under a prefix, checked once at start: every replica must build the same keys.

Layout 3 (``sessions.keys``) puts a conversation's keys under its due shard's hash tag, and a
chat's context (memory, session variables, recent group messages) under its chat's; the number
of shards (``runtime.dueShards``) decides which shard that is: two replicas with different counts
would each see their own half of every conversation (double turns, lost dedup). The record
``{"layout": 3, "dueShards": N}`` under ``<prefix>:layout`` says so; a replica that disagrees
does not start (a replica of an older version, which expects another layout, neither).

Layout 2 (up to the version that brought layout 3) kept the chat's context in keys of their own
slots (``<prefix>:memory:<integration|chat>``, ``<prefix>:session:<id>:vars``,
``<prefix>:group-history:<integration|chat>``). A replica that finds layout 2 with its own
``dueShards`` moves those keys to their new names (DUMP, RESTORE with the TTL left, DEL: across
slots, on a cluster as on one server), then records layout 3; a replica starting meanwhile finds
layout 2 too and moves alongside (a key already at its new name wins), so none serves before the
keys have moved. A session's variables move to its chat's slot, which its record names; the
variables of a session without a record are dropped (they would expire soon anyway).

Layout 1 (up to 0.1) tagged each key with its conversation (``<prefix>:{<conversation>}:burst``)
and kept one due index, ``<prefix>:due``. A prefix without a record is claimed as layout 2 by the
first replica, which on a single server (layout 1 never ran on a cluster) renames those keys
once - bindings keep their sessions, queued messages and running turns carry on - and then moves
on to layout 3 as above. Stop every replica of an older version first: one still running would
keep writing the old keys.
"""

from __future__ import annotations

import json
from typing import Any, cast

import structlog
from redis.asyncio.cluster import RedisCluster

from sessions.connection import RedisClient, RedisStartupError
from sessions.keys import KeyBuilder

log = structlog.get_logger("sessions.layout")

LAYOUT = 3
_CONV_PARTS = ("dedup", "burst", "burstmeta", "turn", "lease", "binding", "cancel")
_BATCH = 500  # layout-2 keys moved per round of pipelines


class LayoutMismatch(RedisStartupError):
    """The data under this key prefix was laid out by replicas configured differently."""


async def ensure_layout(client: RedisClient, keys: KeyBuilder) -> None:
    """Check the recorded layout, upgrading the keys of an older one first (layout 1 when
    there is no record, then layout 2), and record this one."""
    mine = {"layout": LAYOUT, "dueShards": keys.shards}
    previous = {"layout": 2, "dueShards": keys.shards}
    if await client.set(keys.layout(), json.dumps(previous), nx=True):
        if not isinstance(client, RedisCluster):
            moved = await upgrade_layout_1(client, keys)
            if moved:
                log.warning("keys of layout 1 moved to the sharded layout", keys=moved)
    raw = await client.get(keys.layout())
    theirs: dict[str, Any] = json.loads(raw) if raw else {}
    if theirs == previous:
        moved = await upgrade_layout_2(client, keys)
        await client.set(keys.layout(), json.dumps(mine))
        if moved:
            log.warning("layout 3: chat context keys moved to their chat's slot", keys=moved)
        return
    if theirs == mine:
        return
    if theirs.get("dueShards") != keys.shards:
        raise LayoutMismatch(
            f"runtime.dueShards is {keys.shards}, but the data under keyPrefix "
            f"{keys.prefix!r} is laid out for {theirs.get('dueShards')} due shards "
            f"(layout {theirs.get('layout')}): every replica must use the same value; "
            "to change it, start on a new keyPrefix"
        )
    raise LayoutMismatch(
        f"the data under keyPrefix {keys.prefix!r} is in key layout {theirs.get('layout')}, "
        f"which this version (layout {LAYOUT}) does not know: run the version that wrote it "
        "(or a newer one)"
    )


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


def _glob(text: str) -> str:
    """``text`` as a SCAN MATCH pattern matching only itself."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _chat_of(name: str) -> tuple[str, str]:
    integration, _, chat = name.partition("|")
    return integration, chat


async def upgrade_layout_2(client: RedisClient, keys: KeyBuilder) -> int:
    """Move every layout-2 chat context key of ``keys.prefix`` (memory, session variables,
    group history) to its layout-3 name, TTL kept; how many keys moved. SCAN on every primary
    of a cluster (redis-py's ``RedisCluster.scan_iter`` goes through each node's cursor)."""
    head = _glob(keys.prefix + keys.sep)
    moved = 0
    for kind, pattern in (
        ("memory", f"{head}memory{keys.sep}*"),
        ("group-history", f"{head}group-history{keys.sep}*"),
        ("vars", f"{head}session{keys.sep}*{keys.sep}vars"),
    ):
        batch: list[str] = []
        async for old in client.scan_iter(match=pattern, count=1000):
            batch.append(old)
            if len(batch) >= _BATCH:
                moved += await _move(client, keys, kind, batch)
                batch = []
        if batch:
            moved += await _move(client, keys, kind, batch)
    return moved


async def _move(client: RedisClient, keys: KeyBuilder, kind: str, olds: list[str]) -> int:
    """Move ``olds`` (layout-2 keys of ``kind``): DUMP and PTTL each (and a session's record
    for its chat), RESTORE at the new name, DEL the old; three pipelines, each key alone."""
    sep = keys.sep
    # the part of each old name after its kind: "<integration|chat>", or a session id for vars
    if kind == "vars":
        names = [old[len(keys.prefix + sep + "session" + sep) : -len(sep + "vars")] for old in olds]
    else:
        names = [old[len(keys.prefix + sep + kind + sep) :] for old in olds]
    async with client.pipeline(transaction=False) as pipe:
        for old, name in zip(olds, names, strict=True):
            pipe.dump(old)
            pipe.pttl(old)
            if kind == "vars":
                pipe.hmget(keys.session_record(name), ["integrationId", "chatId"])
        read = await pipe.execute()
    step = 3 if kind == "vars" else 2
    restores: list[tuple[str, int, bytes]] = []
    for i, name in enumerate(names):
        value, ttl = read[i * step], int(read[i * step + 1])
        if value is None or ttl == -2:  # gone meanwhile (moved by another replica)
            continue
        if kind == "memory":
            new = keys.memory(*_chat_of(name))
        elif kind == "group-history":
            new = keys.group_history(*_chat_of(name))
        else:
            integration, chat = read[i * step + 2]
            if integration is None or chat is None:
                continue  # no record: the variables of a gone session go
            new = keys.session_variables(integration, chat, name)
        restores.append((new, max(ttl, 0), value))
    if restores:
        async with client.pipeline(transaction=False) as pipe:
            for new, ttl, value in restores:
                pipe.restore(new, ttl, value)  # no REPLACE: a key already there wins
            for outcome in await pipe.execute(raise_on_error=False):
                if isinstance(outcome, Exception) and "BUSYKEY" not in str(outcome):
                    raise outcome
    async with client.pipeline(transaction=False) as pipe:
        for old in olds:
            pipe.delete(old)
        await pipe.execute()
    return len(restores)
