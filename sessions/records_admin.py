"""Session records, session variables and group memory: what the admin API and the experts'
context read. Bindings (``store.py``) decide which session is current; these describe them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from importlib import resources
from typing import Any, NamedTuple, cast

from sessions.audit import AuditEntry, AuditLimits, AuditStore
from sessions.connection import RedisClient
from sessions.keys import KeyBuilder
from sessions.store import audit_fields

DAY_MS = 24 * 3_600_000


class TurnContext(NamedTuple):
    memory: list[dict[str, Any]]
    variables: dict[str, Any]  # conversation variables
    group: list[dict[str, Any]]  # recent unmentioned group messages
    backend: dict[str, Any]  # what the expert backend holds of the conversation variables


class SessionRecords:
    def __init__(
        self,
        *,
        client: RedisClient,
        keys: KeyBuilder,
        retention_ms: int = 7 * DAY_MS,
        memory_ttl_ms: int = 400 * DAY_MS,
        memory_max_items: int = 50,
        audit_limits: Callable[[], AuditLimits] = AuditLimits,
    ) -> None:
        self.redis = client
        self.audit = AuditStore(client=client, keys=keys, limits=audit_limits)
        self.keys = keys
        self.retention_ms = retention_ms
        self.memory_ttl_ms = memory_ttl_ms
        self.memory_max_items = memory_max_items
        self._forget = client.register_script(
            resources.files("sessions").joinpath("lua", "forget.lua").read_text("utf-8")
        )
        self._vars = client.register_script(
            resources.files("sessions").joinpath("lua", "vars_apply.lua").read_text("utf-8")
        )

    # --- sessions --------------------------------------------------------------------------
    async def opened(self, session_id: str, fields: dict[str, str], *, at_ms: int) -> None:
        """Record a new session and index it under its chat (both kept ``retention_ms``)."""
        key = self.keys.session_record(session_id)
        index = self.keys.chat_sessions(fields["integrationId"], fields["chatId"])
        async with self.redis.pipeline(transaction=False) as pipe:
            record: dict[Any, Any] = {**fields, "sessionId": session_id, "createdAt": str(at_ms)}
            pipe.hset(key, mapping=record)
            pipe.pexpire(key, self.retention_ms)
            pipe.zadd(index, {session_id: at_ms})
            pipe.zremrangebyrank(index, 0, -1001)  # the newest thousand per chat
            pipe.pexpire(index, self.retention_ms)
            await pipe.execute()
        # Listed at once on the Sessions page (its first turn may still run).
        summary: dict[str, Any] = {
            k: fields[k] for k in ("chatId", "chatType", "conversation", "xpertId") if k in fields
        }
        await self.audit.session_opened(fields["integrationId"], session_id, summary, at_ms=at_ms)

    async def get(self, session_id: str) -> dict[str, str]:
        return cast(dict[str, str], await self.redis.hgetall(self.keys.session_record(session_id)))

    async def get_many(self, session_ids: list[str]) -> list[dict[str, str]]:
        """The records of ``session_ids`` ({} where none), in one pipeline."""
        if not session_ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for session_id in session_ids:
                pipe.hgetall(self.keys.session_record(session_id))
            return cast(list[dict[str, str]], await pipe.execute())

    async def of_chat(self, integration_id: str, chat_id: str, limit: int = 100) -> list[str]:
        index = self.keys.chat_sessions(integration_id, chat_id)
        return cast(list[str], await self.redis.zrevrange(index, 0, limit - 1))

    async def apply_variables(self, session_id: str, writes: list[tuple[str, str, Any]]) -> None:
        """Conversation variables ``(name, reducer, value)``: replace | append | merge, default
        (set only if unset), backend (the backend's authoritative value, also remembered as
        what it holds) or sent (only remembered as what it holds); one atomic step."""
        if not writes:
            return
        args: list[Any] = [self.retention_ms]
        for name, reducer, value in writes:
            args += [name, reducer, json.dumps(value, ensure_ascii=False)]
        await self._vars(keys=[self.keys.session_variables(session_id)], args=args)

    async def turn_context(
        self, integration_id: str, chat_id: str, session_id: str, *, group_since_ms: int | None
    ) -> TurnContext:
        """What a turn reads, in one round trip: the chat's memory, the session's conversation
        variables (and what the expert backend holds of them) and, when ``group_since_ms`` is
        given, recent unmentioned group messages."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.lrange(self.keys.memory(integration_id, chat_id), 0, -1)
            pipe.hgetall(self.keys.session_variables(session_id))
            if group_since_ms is not None:
                pipe.lrange(self.keys.group_history(integration_id, chat_id), 0, -1)
            results = await pipe.execute()
        memory = [json.loads(r) for r in results[0]]
        stored: dict[str, str] = results[1]
        values = {k[4:]: json.loads(v) for k, v in stored.items() if k.startswith("var.")}
        backend = {k[8:]: json.loads(v) for k, v in stored.items() if k.startswith("backend.")}
        group: list[dict[str, Any]] = []
        if group_since_ms is not None:
            group = [
                m
                for m in (json.loads(r) for r in results[2])
                if int(m.get("at", 0)) >= group_since_ms
            ]
        return TurnContext(memory, values, group, backend)

    async def turn_done(
        self,
        session_id: str,
        variables: dict[str, str],
        audit: dict[str, Any] | None,
        *,
        entry: AuditEntry | None = None,
        session: dict[str, Any] | None = None,
        now_ms: int = 0,
        audit_maxlen: int = 10_000,
    ) -> None:
        """At the end of a turn, two round trips at once: the variables it saw (for the admin
        API) and its row in the audit stream (bounded by MAXLEN rather than a TTL), pipelined;
        and its audit record (``entry``, sessions/audit.py; ``session``: the session's summary
        should the trail have none yet)."""
        # var.* are the reducers' (apply_variables, JSON); only the turn's other values here.
        seen = {k: v for k, v in variables.items() if not k.startswith("var.")}
        writes: list[Coroutine[Any, Any, Any]] = []
        if (session_id and seen) or audit:
            writes.append(self._turn_rows(session_id, seen, audit, audit_maxlen))
        if entry is not None:
            writes.append(self.audit.put(entry, now_ms=now_ms, session=session or {}))
        await asyncio.gather(*writes)

    async def _turn_rows(
        self, session_id: str, seen: dict[str, str], audit: dict[str, Any] | None, maxlen: int
    ) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            if session_id and seen:
                key = self.keys.session_variables(session_id)
                pipe.hset(key, mapping=cast(dict[Any, Any], seen))
                pipe.pexpire(key, self.retention_ms)
            if audit:
                pipe.xadd(self.keys.audit(), audit_fields(audit), maxlen=maxlen, approximate=True)
            await pipe.execute()

    async def variables(self, session_id: str) -> dict[str, str]:
        key = self.keys.session_variables(session_id)
        return cast(dict[str, str], await self.redis.hgetall(key))

    # --- recent group messages the bot was not asked about ---------------------------------
    async def add_group_message(
        self,
        integration_id: str,
        chat_id: str,
        item: dict[str, Any],
        *,
        limit: int,
        window_ms: int,
    ) -> None:
        key = self.keys.group_history(integration_id, chat_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.rpush(key, json.dumps(item, ensure_ascii=False))
            pipe.ltrim(key, -limit, -1)
            pipe.pexpire(key, window_ms)
            await pipe.execute()

    # --- group memory ----------------------------------------------------------------------
    async def remember(self, integration_id: str, chat_id: str, item: dict[str, Any]) -> int:
        """Append a memory item; returns how many the chat keeps (oldest dropped past the cap)."""
        key = self.keys.memory(integration_id, chat_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.rpush(key, json.dumps(item, ensure_ascii=False))
            pipe.ltrim(key, -self.memory_max_items, -1)
            # Group memory outlives sessions; it expires only after a long unused stretch.
            pipe.pexpire(key, self.memory_ttl_ms)
            pipe.llen(key)
            *_, count = await pipe.execute()
        return int(count)

    async def memory(self, integration_id: str, chat_id: str) -> list[dict[str, Any]]:
        raw = await self.redis.lrange(self.keys.memory(integration_id, chat_id), 0, -1)
        return [json.loads(r) for r in cast(list[str], raw)]

    async def forget(self, integration_id: str, chat_id: str, n: int) -> dict[str, Any] | None:
        removed = await self._forget(keys=[self.keys.memory(integration_id, chat_id)], args=[n])
        return json.loads(removed) if removed else None
