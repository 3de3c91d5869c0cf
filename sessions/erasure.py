"""Erasure on request: what Redis holds of one chat, or of one sender, removed (the admin API's
``DELETE /v1.0/chats/…/records`` and ``/senders/…/records``; the archive's rows are removed by
``gateway.archive.erasure``).

A chat: its turns' audit records (with their index entries and its sessions' summaries), its
session records and conversation histories, its sessions' variables, its memory, recent group
messages and transcript, and the archive outbox's entries about it. A sender: the audit records
of the turns that ran as them (found by reading the integration's records), their words in the
records of other senders' turns (redacted: issue 36), the memory items they added in any chat of
the integration, their entries in the conversation histories the gateway keeps for a model, and
the outbox's entries of theirs. Every key an integration's audit
trail has carries its hash tag, so its removals are one MULTI on one slot; the other keys are
removed each on its own slot. Counts in Redis' session summaries are not recomputed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, cast

from sessions.connection import RedisClient
from sessions.keys import KeyBuilder
from sessions.outbox import GROUP

PAGE = 500


class RedisErasure:
    def __init__(self, *, client: RedisClient, keys: KeyBuilder) -> None:
        self.redis = client
        self.keys = keys

    async def known(self, integration_id: str) -> bool:
        """Whether Redis holds audit records or sessions of the integration."""
        k = self.keys
        found = await self.redis.exists(k.audit_records(integration_id))
        return bool(found or await self.redis.exists(k.audit_sessions(integration_id)))

    async def chat(self, integration_id: str, chat_id: str) -> dict[str, int]:
        k, i = self.keys, integration_id
        ids = cast(list[str], await self.redis.zrange(k.audit_chat(i, chat_id), 0, -1))
        sessions = set(await self._drop_records(i, ids))
        index = k.chat_sessions(i, chat_id)
        sessions |= set(cast(list[str], await self.redis.zrange(index, 0, -1)))
        async with self.redis.pipeline(transaction=True) as pipe:  # the integration's slot
            for sid in sessions:
                pipe.hdel(k.audit_session_info(i), sid)
                pipe.zrem(k.audit_sessions(i), sid)
                pipe.delete(k.audit_session(i, sid))
            pipe.delete(k.audit_chat(i, chat_id))
            await pipe.execute()
        memory = int(await self.redis.llen(k.memory(i, chat_id)))
        transcript = int(await self.redis.hlen(k.timeline_messages(i, chat_id)))
        chat_keys = [k.memory(i, chat_id), k.group_history(i, chat_id)]
        chat_keys += [k.timeline_messages(i, chat_id), k.timeline_order(i, chat_id)]
        chat_keys += [k.session_variables(i, chat_id, sid) for sid in sessions]
        await self.redis.delete(*chat_keys)  # one slot: the chat's hash tag
        for key in [index, *(k.session_record(s) for s in sessions)]:
            await self.redis.delete(key)
        for sid in sessions:
            await self.redis.delete(k.history(sid))
        queued = await self._purge_outbox(i, lambda body: body.get("chatId") == chat_id)
        return {
            "turns": len(ids),
            "sessions": len(sessions),
            "memoryItems": memory,
            "transcriptMessages": transcript,
            "queued": queued,
        }

    async def sender(self, integration_id: str, sender_id: str) -> dict[str, int]:
        k, i = self.keys, integration_id
        ids: list[str] = []
        redacted: dict[str, str] = {}
        cursor = 0
        while True:
            cursor, page = await self.redis.hscan(k.audit_records(i), cursor, count=PAGE)
            for record_id, body in cast(dict[str, str], page).items():
                record = json.loads(body)
                if record.get("senderId") == sender_id:
                    ids.append(record_id)
                elif sender_id in (record.get("input") or {}).get("senders", []):
                    redacted[record_id] = json.dumps(redact(record, sender_id))
            if not cursor:
                break
        sessions = await self._drop_records(i, ids)
        if redacted:
            flat = [part for pair in redacted.items() for part in pair]
            await self.redis.execute_command("HSET", k.audit_records(i), *flat)
        memory = 0
        async for key in self.redis.scan_iter(match=k.memory_pattern(i), count=PAGE):
            for raw in cast(list[str], await self.redis.lrange(key, 0, -1)):
                if json.loads(raw).get("by") == sender_id:
                    memory += int(await self.redis.lrem(key, 0, raw))
        known = cast(list[str], await self.redis.zrange(k.audit_sessions(i), 0, -1))
        history = await self._drop_history([*sessions, *known], sender_id)

        def theirs(body: dict[str, Any]) -> bool:
            # Their own, and others' records holding their words (not archived, then).
            senders = (body.get("input") or {}).get("senders", [])
            return sender_id in (body.get("senderId"), body.get("by")) or sender_id in senders

        queued = await self._purge_outbox(i, theirs)
        return {
            "turns": len(ids),
            "redactedTurns": len(redacted),
            "memoryItems": memory,
            "historyMessages": history,
            "queued": queued,
        }

    async def _drop_history(self, session_ids: Iterable[str], sender_id: str) -> int:
        """The messages of a model's conversation history (``sessions.history``) that a turn
        with the sender's words wrote: their message and the answer to it."""
        dropped = 0
        for sid in dict.fromkeys(session_ids):
            key = self.keys.history(sid)
            for raw in cast(list[str], await self.redis.lrange(key, 0, -1)):
                if sender_id in json.loads(raw).get("senders", []):
                    dropped += int(await self.redis.lrem(key, 0, raw))
        return dropped

    async def _drop_records(self, integration_id: str, ids: list[str]) -> list[str]:
        """Remove audit records and every index entry of theirs; their sessions' ids."""
        k, i = self.keys, integration_id
        if not ids:
            return []
        bodies = cast(list[str | None], await self.redis.hmget(k.audit_records(i), ids))
        sessions: list[str] = []
        async with self.redis.pipeline(transaction=True) as pipe:  # the integration's slot
            for record_id, body in zip(ids, bodies, strict=True):
                record = json.loads(body) if body else {}
                pipe.zrem(k.audit_ends(i), record_id)
                if record.get("chatId") is not None:
                    pipe.zrem(k.audit_chat(i, str(record["chatId"])), record_id)
                if record.get("outcome"):
                    pipe.zrem(k.audit_outcome(i, str(record["outcome"])), record_id)
                if record.get("sessionId"):
                    sessions.append(str(record["sessionId"]))
                    pipe.zrem(k.audit_session(i, str(record["sessionId"])), record_id)
            pipe.hdel(k.audit_records(i), *ids)
            await pipe.execute()
        return list(dict.fromkeys(sessions))

    async def _purge_outbox(
        self, integration_id: str, matches: Callable[[dict[str, Any]], bool]
    ) -> int:
        """Remove the outbox entries whose body ``matches`` (acknowledged too, were they read)."""
        key = self.keys.audit_outbox(integration_id)
        start, found = "-", 0
        while True:
            rows = cast(
                list[tuple[str, dict[str, str]]],
                await self.redis.xrange(key, min=start, count=PAGE),
            )
            gone = [sid for sid, fields in rows if _matches(fields.get("body", ""), matches)]
            if gone:
                await self._xdel(key, gone)
                found += len(gone)
            if len(rows) < PAGE:
                return found
            start = "(" + rows[-1][0]

    async def _xdel(self, key: str, ids: Iterable[str]) -> None:
        ids = list(ids)
        groups: list[dict[str, Any]] = await self.redis.xinfo_groups(key)
        async with self.redis.pipeline(transaction=True) as pipe:
            if any(g.get("name") == GROUP for g in groups):
                pipe.xack(key, GROUP, *ids)
            pipe.xdel(key, *ids)
            await pipe.execute()


def _matches(body: str, test: Callable[[dict[str, Any]], bool]) -> bool:
    try:
        value = json.loads(body)
    except ValueError:
        return False
    return isinstance(value, dict) and test(value)


ERASED = "[erased on request: the words of a sender]"


def redact(record: dict[str, Any], sender_id: str) -> dict[str, Any]:
    """Another sender's turn record with the erased sender's words in it (a merged or steered
    turn): its input text redacted, the sender's id gone from its senders."""
    text = ERASED
    data = dict(record.get("input") or {})
    data.update(text=text, chars=len(text), truncated=False)
    data["senders"] = [s for s in data.get("senders", []) if s != sender_id]
    return {**record, "input": data}
