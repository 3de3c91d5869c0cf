"""Session records, session variables and group memory: what the admin API and the experts'
context read. Bindings (``store.py``) decide which session is current; these describe them."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Coroutine, Mapping
from importlib import resources
from types import MappingProxyType
from typing import Any, NamedTuple, cast

from redis.commands.core import AsyncScript

from sessions.audit import EVENTS_MAXLEN, AuditEntry, AuditLimits, AuditStore
from sessions.autopipe import ScriptPipe
from sessions.connection import RedisClient
from sessions.keys import KeyBuilder
from sessions.store import audit_fields

DAY_MS = 24 * 3_600_000


class TurnContext(NamedTuple):
    memory: list[dict[str, Any]]
    variables: dict[str, Any]  # conversation variables
    group: list[dict[str, Any]]  # recent unmentioned group messages
    backend: dict[str, Any]  # what the expert backend holds of the conversation variables
    # What the session's previous turn saw (sys.*, memory.rules), as stored ({}: write it all).
    seen: Mapping[str, str] = MappingProxyType({})


def _script(name: str) -> str:
    return resources.files("sessions").joinpath("lua", name).read_text("utf-8")


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
        self._forget = client.register_script(_script("forget.lua"))
        self._vars = client.register_script(_script("vars_apply.lua"))
        self._context_read = client.register_script(_script("context_read.lua"))
        self._stream_add = client.register_script(_script("stream_add.lua"))
        self._hash_put = client.register_script(_script("hash_put.lua"))
        self._index_add = client.register_script(_script("index_add.lua"))
        # The session store's auto-pipeline (``use_pipe``): a turn's reads and writes go out
        # together with the other script calls made meanwhile; without one, one call each.
        self.pipe: ScriptPipe | None = None

    def use_pipe(self, pipe: ScriptPipe) -> None:
        """Send the turn's reads and writes (context, variables, audit) through ``pipe``."""
        self.pipe = pipe
        self.audit.pipe = pipe

    async def _call(self, script: AsyncScript, keys: list[str], args: list[Any]) -> Any:
        if self.pipe is not None:
            return await self.pipe.evalsha(script, keys, args)
        return await script(keys=keys, args=args)

    # --- sessions --------------------------------------------------------------------------
    async def opened(
        self, session_id: str, fields: dict[str, str], *, at_ms: int, timeout_ms: int = 0
    ) -> None:
        """Record a new session, index it under its chat (both kept ``retention_ms``) and list
        it on the Sessions page at once (its first turn may still run): three scripts, each on
        its own key's slot, sent together. ``timeout_ms``, its idle timeout, goes to the
        archive (which ends it by that when nobody does)."""
        record: dict[str, str] = {**fields, "sessionId": session_id, "createdAt": str(at_ms)}
        flat: list[Any] = [self.retention_ms]
        for name, value in record.items():
            flat += [name, value]
        index = self.keys.chat_sessions(fields["integrationId"], fields["chatId"])
        summary: dict[str, Any] = {
            k: fields[k] for k in ("chatId", "chatType", "conversation", "xpertId") if k in fields
        }
        await asyncio.gather(
            self._call(self._hash_put, [self.keys.session_record(session_id)], flat),
            # the newest thousand sessions per chat
            self._call(self._index_add, [index], [at_ms, session_id, 1000, self.retention_ms]),
            self.audit.session_opened(
                fields["integrationId"],
                session_id,
                summary,
                at_ms=at_ms,
                archived={
                    **fields,
                    "sessionId": session_id,
                    "openedAt": at_ms,
                    "timeoutMs": timeout_ms,
                },
            ),
        )

    async def ended(self, integration_id: str, session_id: str, *, at_ms: int, by: str) -> None:
        """A session's end, for the archive (its Redis records simply expire)."""
        body = {"sessionId": session_id, "integrationId": integration_id, "endedAt": at_ms}
        await self.audit.outbox_add(
            integration_id, "session_end", session_id, json.dumps({**body, "by": by})
        )

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

    async def apply_variables(
        self,
        integration_id: str,
        chat_id: str,
        session_id: str,
        writes: list[tuple[str, str, Any]],
    ) -> None:
        """Conversation variables ``(name, reducer, value)`` of a session of the chat: replace |
        append | merge, default (set only if unset), backend (the backend's authoritative value,
        also remembered as what it holds) or sent (only remembered as what it holds); one
        atomic step."""
        if not writes:
            return
        args: list[Any] = [self.retention_ms]
        for name, reducer, value in writes:
            raw = value if reducer == "seen" else json.dumps(value, ensure_ascii=False)
            args += [name, reducer, raw]
        key = self.keys.session_variables(integration_id, chat_id, session_id)
        await self._call(self._vars, [key], args)

    async def turn_context(
        self, integration_id: str, chat_id: str, session_id: str, *, group_since_ms: int | None
    ) -> TurnContext:
        """What a turn reads, in one round trip: the chat's memory, the session's conversation
        variables (and what the expert backend holds of them, and what its last turn saw) and,
        when ``group_since_ms`` is given, recent unmentioned group messages."""
        raw = await self.context_reads(
            integration_id, chat_id, session_id, group_since_ms=group_since_ms
        )
        return self.context_of(raw, group_since_ms=group_since_ms)

    def context_reads(
        self, integration_id: str, chat_id: str, session_id: str, *, group_since_ms: int | None
    ) -> asyncio.Future[list[Any]]:
        """The reads of :meth:`turn_context`, on their way: one script call on the chat's slot
        (context_read.lua); :meth:`context_of` makes the context of what it answers."""
        keys = [
            self.keys.memory(integration_id, chat_id),
            self.keys.session_variables(integration_id, chat_id, session_id),
        ]
        if group_since_ms is not None:
            keys.append(self.keys.group_history(integration_id, chat_id))
        return asyncio.ensure_future(self._call(self._context_read, keys, []))

    def context_of(self, results: list[Any], *, group_since_ms: int | None) -> TurnContext:
        memory = [json.loads(r) for r in results[0]]
        flat: list[str] = results[1]
        values: dict[str, Any] = {}
        backend: dict[str, Any] = {}
        seen: dict[str, str] = {}
        for i in range(0, len(flat), 2):
            k, v = flat[i], flat[i + 1]
            if k.startswith("var."):
                values[k[4:]] = json.loads(v)
            elif k.startswith("backend."):
                backend[k[8:]] = json.loads(v)
            else:
                seen[k] = v
        pttl = int(results[2])
        if pttl < self.retention_ms * 6 // 7:
            seen = {}  # all written again at the turn's end: the expiry renewed now and then
        group: list[dict[str, Any]] = []
        if group_since_ms is not None:
            group = [
                m
                for m in (json.loads(r) for r in results[3])
                if int(m.get("at", 0)) >= group_since_ms
            ]
        return TurnContext(memory, values, group, backend, seen)

    def turn_writes(
        self,
        session_id: str,
        variables: dict[str, str],
        audit: dict[str, Any] | None,
        *,
        entry: AuditEntry | None = None,
        session: dict[str, Any] | None = None,
        now_ms: int = 0,
        audit_maxlen: int = EVENTS_MAXLEN,
        stored: dict[str, str] | None = None,
    ) -> list[Coroutine[Any, Any, Any]]:
        """At the end of a turn, not yet started: the variables it saw (for the admin API; only
        those that differ from ``stored``, what the session's last turn saw), its audit record
        (``entry``, sessions/audit.py; ``session``: the session's summary should the trail have
        none yet) and its row of the event stream (``audit``, at most about ``audit_maxlen``
        rows kept): with ``entry``, in the same script call, on the integration's stream; a
        row alone goes to the global stream. A caller that starts them in the same tick as its
        own calls has them sent together. The variables go to the session of ``entry``'s chat
        (none without an entry)."""
        # var.* are the reducers' (apply_variables, JSON); only the turn's other values here.
        stored = stored or {}
        seen = [
            (k, "seen", v)
            for k, v in variables.items()
            if not k.startswith("var.") and stored.get(k) != v
        ]
        writes: list[Coroutine[Any, Any, Any]] = []
        row = audit_fields(audit) if audit else None
        if entry is not None:
            put = self.audit.put(
                entry, now_ms=now_ms, session=session or {}, row=row, maxlen=audit_maxlen
            )
            writes.append(put)
        elif row:
            fields: list[Any] = [audit_maxlen]
            for k, v in row.items():
                fields += [k, v]
            writes.append(self._call(self._stream_add, [self.keys.audit()], fields))
        if session_id and seen and entry is not None:
            chat = entry.integration_id, entry.chat_id
            writes.append(self.apply_variables(*chat, session_id, seen))
        return writes

    async def variables(
        self, session_id: str, record: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """The session's variables, by its record (read here unless given): {} for a session
        without one (its chat, which the variables' key needs, is unknown)."""
        if record is None:
            record = await self.get(session_id)
        if "integrationId" not in record or "chatId" not in record:
            return {}
        key = self.keys.session_variables(record["integrationId"], record["chatId"], session_id)
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
        await self._memory_changed(integration_id, chat_id, "remember", item)
        return int(count)

    async def _memory_changed(
        self, integration_id: str, chat_id: str, action: str, item: dict[str, Any], **extra: Any
    ) -> None:
        """A change of group memory, for the archive: its own call after the change (the
        memory is on the chat's slot, the outbox on the integration's)."""
        change: dict[str, Any] = {"integrationId": integration_id, "chatId": chat_id}
        change["action"] = action
        change |= {"item": item, "by": item.get("by"), "at": item.get("at"), **extra}
        body = json.dumps(change, ensure_ascii=False)
        await self.audit.outbox_add(integration_id, "memory", uuid.uuid4().hex, body)

    async def memory(self, integration_id: str, chat_id: str) -> list[dict[str, Any]]:
        raw = await self.redis.lrange(self.keys.memory(integration_id, chat_id), 0, -1)
        return [json.loads(r) for r in cast(list[str], raw)]

    async def forget(
        self, integration_id: str, chat_id: str, n: int, *, by: str = "", at_ms: int = 0
    ) -> dict[str, Any] | None:
        """Remove the ``n``-th item; ``by`` and ``at_ms`` say who and when, for the archive."""
        removed = await self._forget(keys=[self.keys.memory(integration_id, chat_id)], args=[n])
        if not removed:
            return None
        item: dict[str, Any] = json.loads(removed)
        await self._memory_changed(integration_id, chat_id, "forget", item, by=by, at=at_ms)
        return item
