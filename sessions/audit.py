"""The session audit trail in Redis: one record per turn, per integration, newest first.

A record is JSON this module does not interpret beyond what indexes it (``AuditEntry``). Per
integration (one hash slot, ``keys.py``): the records, an index of them by end time, one per
chat, per session and per outcome, the sessions with a small summary each, and the event stream
of its turns' short rows. One script (``audit_put.lua``) stores a record, indexes it, adds the
turn's row and trims the trail past ``retention_ms`` and ``max_records``; reads take one page
of an index with its records in one round trip (``audit_page.lua``), so a query reads what it
answers, not the whole trail. With an archive (``AuditLimits.outbox_max``), the same script
queues the record in the integration's outbox (``sessions/outbox.py``); a new session and a
change of group memory are queued by their own calls.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, cast

from sessions.autopipe import ScriptPipe
from sessions.connection import RedisClient
from sessions.keys import KeyBuilder
from sessions.scripts import lua

DAY_MS = 86_400_000
PAGE = 200  # index entries read per round trip while a filter skips records
EVENTS_MAXLEN = 10_000  # rows kept (about) per event stream: the global one, each integration's


@dataclass(frozen=True, slots=True)
class AuditLimits:
    retention_ms: int = 7 * DAY_MS
    max_records: int = 100_000
    outbox_max: int = 0  # the archive outbox's bound (sessions/outbox.py); 0: no archive


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """A record to store and what it is indexed by."""

    record_id: str
    integration_id: str
    chat_id: str
    session_id: str  # "" when the turn had none (it failed before binding)
    outcome: str
    end_ms: int
    body: str  # the record, JSON


IndexKind = Literal["ends", "chat", "session", "outcome"]


class AuditStore:
    def __init__(
        self,
        *,
        client: RedisClient,
        keys: KeyBuilder,
        limits: Callable[[], AuditLimits] = AuditLimits,
    ) -> None:
        self.redis = client
        self.keys = keys
        self.limits = limits  # read at each use: a reload changes them
        self._put = client.register_script(lua("audit_put.lua"))
        self.pipe: ScriptPipe | None = None  # the store's auto-pipeline, for the writes
        self._page = client.register_script(lua("audit_page.lua"))
        self._session_open = client.register_script(lua("audit_session.lua"))
        self._outbox_add = client.register_script(lua("outbox_add.lua"))
        self.outbox_refused = 0  # entries a full outbox did not take (xgw_archive_dropped_total)

    # --- writes ------------------------------------------------------------------------------
    async def put(
        self,
        entry: AuditEntry,
        *,
        now_ms: int,
        session: dict[str, Any],
        row: Mapping[str, str] | None = None,
        maxlen: int = EVENTS_MAXLEN,
    ) -> int:
        """Store ``entry``; ``session`` is the session's summary should it have none yet (a
        session opened before the audit trail existed); ``row``, the turn's short row, goes to
        the integration's event stream (``keys.audit_events``, at most about ``maxlen`` rows)
        in the same script call. Returns the records the integration keeps."""
        k, i, limits = self.keys, entry.integration_id, self.limits()
        call = self._put if self.pipe is None else partial(self.pipe.evalsha, self._put)
        keys = [
            k.audit_records(i),
            k.audit_ends(i),
            k.audit_chat(i, entry.chat_id),
            k.audit_session(i, entry.session_id),
            k.audit_outcome(i, entry.outcome),
            k.audit_sessions(i),
            k.audit_session_info(i),
            k.audit_events(i),
            k.audit_outbox(i),
        ]
        args: list[Any] = [
            entry.record_id,
            entry.body,
            entry.end_ms,
            now_ms,
            limits.retention_ms,
            limits.max_records,
            entry.session_id,
            json.dumps(session, separators=(",", ":"), ensure_ascii=False),
            entry.outcome,
            maxlen if row else 0,
            limits.outbox_max,
        ]
        for name, value in (row or {}).items():
            args += (name, value)
        kept, queued = await call(keys=keys, args=args)
        self._queued(int(queued))
        return int(kept)

    def _queued(self, queued: int) -> None:
        if queued < 0:
            self.outbox_refused += 1

    async def outbox_add(self, integration_id: str, kind: str, entry_id: str, body: str) -> None:
        """Queue an entry for the archive alone (a change of group memory, a session's end):
        nothing when there is no archive, counted when the outbox is full."""
        bound = self.limits().outbox_max
        if bound <= 0:
            return
        keys = [self.keys.audit_outbox(integration_id)]
        args: list[str | int] = [bound, kind, entry_id, body]
        if self.pipe is not None:
            queued = await self.pipe.evalsha(self._outbox_add, keys, args)
        else:
            queued = await self._outbox_add(keys=keys, args=args)
        self._queued(int(queued))

    async def session_opened(
        self,
        integration_id: str,
        session_id: str,
        info: dict[str, Any],
        *,
        at_ms: int,
        archived: dict[str, Any] | None = None,
    ) -> None:
        """List a new session at once (its first turn may run for a while): one
        script on the integration's slot; the turn's record later adds to its summary.
        ``archived``: the session's row for the archive, queued in the same call."""
        k, limits = self.keys, self.limits()
        body = _json({**info, "turns": 0, "startedAt": at_ms, "lastActiveAt": at_ms})
        keys = [
            k.audit_session_info(integration_id),
            k.audit_sessions(integration_id),
            k.audit_outbox(integration_id),
        ]
        row = _json(archived or {**info, "sessionId": session_id, "openedAt": at_ms})
        args: list[str | int] = [session_id, body, at_ms, limits.retention_ms]
        args += [limits.outbox_max, row]
        if self.pipe is not None:
            queued = await self.pipe.evalsha(self._session_open, keys, args)
        else:
            queued = await self._session_open(keys=keys, args=args)
        self._queued(int(queued))

    # --- reads -------------------------------------------------------------------------------
    def _index(self, integration_id: str, kind: IndexKind, value: str) -> str:
        k = self.keys
        if kind == "chat":
            return k.audit_chat(integration_id, value)
        if kind == "session":
            return k.audit_session(integration_id, value)
        if kind == "outcome":
            return k.audit_outcome(integration_id, value)
        return k.audit_ends(integration_id)

    async def _read(
        self,
        hash_key: str,
        index: str,
        *,
        order: Literal["asc", "desc"],
        high: str,
        low: str,
        offset: int,
        count: int,
    ) -> list[tuple[str, str | None]]:
        ids, values = await self._page(
            keys=[hash_key, index], args=[order, high, low, offset, count]
        )
        return list(zip(cast(list[str], ids), cast(list[str | None], values), strict=True))

    async def records(
        self,
        integration_id: str,
        *,
        index: IndexKind = "ends",
        value: str = "",
        since_ms: int,
        limit: int,
        keep: Callable[[dict[str, Any]], bool] = lambda _r: True,
        order: Literal["asc", "desc"] = "desc",
        max_scan: int = 20_000,
    ) -> list[dict[str, Any]]:
        """Up to ``limit`` records of ``index`` that ended at ``since_ms`` or later, newest first
        (``desc``) or in order, that ``keep`` accepts; a filter reads at most ``max_scan`` index
        entries. Entries whose record the trail no longer keeps are skipped."""
        hash_key = self.keys.audit_records(integration_id)
        key = self._index(integration_id, index, value)
        out: list[dict[str, Any]] = []
        offset = 0
        while len(out) < limit and offset < max_scan:
            count = min(PAGE, max(limit - len(out), 1) * 2, max_scan - offset)
            page = await self._read(
                hash_key,
                key,
                order=order,
                high="+inf",
                low=str(since_ms),
                offset=offset,
                count=count,
            )
            for _id, body in page:
                if body is None:
                    continue
                record = json.loads(body)
                if keep(record):
                    out.append(record)
                    if len(out) == limit:
                        break
            if len(page) < count:
                break
            offset += count
        return out

    async def sessions(
        self, integration_id: str, *, since_ms: int, limit: int, offset: int = 0
    ) -> list[tuple[str, dict[str, Any]]]:
        """The integration's sessions active at ``since_ms`` or later, most recent first, with
        their summaries."""
        page = await self._read(
            self.keys.audit_session_info(integration_id),
            self.keys.audit_sessions(integration_id),
            order="desc",
            high="+inf",
            low=str(since_ms),
            offset=offset,
            count=limit,
        )
        return [(sid, json.loads(body)) for sid, body in page if body is not None]

    async def session_infos(
        self, integration_id: str, session_ids: list[str]
    ) -> dict[str, dict[str, Any]]:
        if not session_ids:
            return {}
        raw = await self.redis.hmget(self.keys.audit_session_info(integration_id), session_ids)
        return {
            sid: json.loads(body)
            for sid, body in zip(session_ids, cast(list[str | None], raw), strict=True)
            if body is not None
        }

    async def running(self, conversations: Iterable[str]) -> dict[str, tuple[bool, dict[str, str]]]:
        """Per conversation: whether a run holds its lease now, and its binding (its current
        session). One pipeline of single-key reads, each in its conversation's slot."""
        convs = list(dict.fromkeys(conversations))
        if not convs:
            return {}
        async with self.redis.pipeline(transaction=False) as pipe:
            for conv in convs:
                pipe.exists(self.keys.lease(conv))
                pipe.hgetall(self.keys.binding(conv))
            rows = await pipe.execute()
        return {conv: (bool(rows[2 * n]), rows[2 * n + 1]) for n, conv in enumerate(convs)}

    async def events(
        self,
        count: int,
        integrations: Iterable[str] = (),
        *,
        event: str | None = None,
        scan: int = EVENTS_MAXLEN,
    ) -> list[dict[str, str]]:
        """The newest ``count`` rows (of ``event`` only, when given), newest first, of the
        global event stream (``keys.audit``: every kind of event) and of each of
        ``integrations``' own (``keys.audit_events``: one turn row each), merged by stream id;
        one pipeline. An integration's stream is read ``count`` rows deep (its rows are all of
        one kind); with ``event``, the global one ``scan`` rows deep."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.xrevrange(self.keys.audit(), count=scan if event else count)
            for integration_id in dict.fromkeys(integrations):
                pipe.xrevrange(self.keys.audit_events(integration_id), count=count)
            answers = cast(list[list[tuple[str, dict[str, str]]]], await pipe.execute())
        out: list[dict[str, str]] = []
        for _id, fields in heapq.merge(*answers, key=_stream_order, reverse=True):
            if event is None or fields.get("event") == event:
                out.append(dict(fields))
                if len(out) == count:
                    break
        return out


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _stream_order(row: tuple[str, Any]) -> tuple[int, int]:
    """A stream row's place: its id ``<ms>-<seq>`` as a pair of numbers."""
    ms, _, seq = row[0].partition("-")
    return int(ms), int(seq or 0)
