"""The session audit trail in the admin API (bearer ``admin.token``, ``gateway.ops.admin``):

- ``GET /v1.0/audit?integrationId=&chatId=&sessionId=&outcome=&since=&limit=`` turn records,
  newest first (``count`` is an alias of ``limit``);
- ``GET /v1.0/audit/events?event=&limit=`` the event stream (session ends, watch fires, one
  short row per turn), newest first: the global stream merged with every configured
  integration's (its turn rows);
- ``GET /v1.0/sessions?integrationId=&chatId=&status=live|recent&outcome=&limit=`` live and
  recent sessions, most recently active first; ``GET /v1.0/sessions/{id}`` one of them;
- ``GET /v1.0/sessions/{id}/audit`` a session's turns in order.

Each query reads one index per integration (``sessions.audit``): a chat's, a session's, an
outcome's or the integration's, never the whole trail. With the archive on, the turn and session
routes also read it (``gateway.archive.reader``) and answer one list, newest first, each record
once (Redis' copy where both have it); they take ``q=`` (a text in the input or the answer, any
case) and ``until=`` (as ``since``). A bad parameter is a 400 with one log line.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

import structlog
from aiohttp import web

from gateway.archive.reader import ArchiveReader, Filters, matches
from gateway.config.model import ID_PATTERN
from gateway.config.settings import Settings
from gateway.errors import Refused
from gateway.ops.admin import Handler, fail, ok
from gateway.turns.records import TURN_OUTCOMES
from sessions import SessionRecords
from sessions.audit import IndexKind

log = structlog.get_logger("gateway.ops.admin")

MAX_LIMIT = 1000
SESSION_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


class Query:
    """The checked query parameters of one request."""

    def __init__(self, request: web.Request) -> None:
        self.q = request.query

    def _text(self, name: str, pattern: re.Pattern[str] | str) -> str | None:
        value = self.q.get(name)
        if value is None or value == "":
            return None
        if not re.fullmatch(pattern, value):
            raise Refused(400, f"{name}: not a valid id")
        return value

    def integration(self) -> str | None:
        return self._text("integrationId", ID_PATTERN)

    def chat(self) -> str | None:
        value = self.q.get("chatId") or None
        # Any printable text (a platform's chat id); undecodable bytes arrive as surrogates,
        # which are not printable.
        if value is not None and not (len(value) <= 256 and value.isprintable()):
            raise Refused(400, "chatId: not a valid id")
        return value

    def session(self) -> str | None:
        return self._text("sessionId", SESSION_ID)

    def outcome(self) -> str | None:
        value = self.q.get("outcome") or None
        if value is not None and value not in TURN_OUTCOMES:
            raise Refused(400, f"outcome: one of {', '.join(TURN_OUTCOMES)}")
        return value

    def status(self) -> str | None:
        value = self.q.get("status") or None
        if value not in (None, "live", "recent"):
            raise Refused(400, "status: live or recent")
        return value

    def text(self) -> str | None:
        """``q``: the text searched for in inputs and answers."""
        value = self.q.get("q") or None
        if value is not None and not (len(value) <= 200 and value.isprintable()):
            raise Refused(400, "q: at most 200 printable characters")
        return value

    def until(self) -> int | None:
        return self.since("until") if self.q.get("until") else None

    def since(self, name: str = "since") -> int:
        """``since``: epoch milliseconds, or an ISO 8601 time (UTC unless it says)."""
        raw = self.q.get(name) or ""
        if not raw:
            return 0
        if raw.isascii() and raw.isdigit() and len(raw) <= 15:
            return int(raw)
        try:
            at = datetime.fromisoformat(raw) if raw.isascii() else None
            if at is not None:
                return int((at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp() * 1000)
        except (ValueError, OverflowError):
            pass
        raise Refused(400, f"{name}: epoch milliseconds or an ISO 8601 time")

    def limit(self, default: int, names: tuple[str, ...] = ("limit", "count")) -> int:
        """A whole number from 1; above the maximum it is the maximum."""
        for name in names:
            raw = self.q.get(name)
            if raw is None:
                continue
            if not (raw.isascii() and raw.isdigit() and int(raw) >= 1):
                raise Refused(400, f"{name} must be a whole number from 1")
            return min(int(raw), MAX_LIMIT)
        return default


class AuditApi:
    def __init__(
        self,
        *,
        settings: Callable[[], Settings],
        records: SessionRecords,
        archive: ArchiveReader | None = None,
    ) -> None:
        self.settings = settings  # read per request: a reload changes integrations, retention
        self.records = records
        self.audit = records.audit
        self.archive = archive

    def setup(self, app: web.Application, guarded: Callable[[Handler], Handler]) -> None:
        r = app.router
        r.add_get("/v1.0/audit", guarded(self._checked(self.turns)))
        r.add_get("/v1.0/audit/events", guarded(self._checked(self.events)))
        r.add_get("/v1.0/sessions", guarded(self._checked(self.sessions)))
        r.add_get("/v1.0/sessions/{sessionId}", guarded(self._checked(self.session)))
        r.add_get("/v1.0/sessions/{sessionId}/audit", guarded(self._checked(self.session_audit)))

    @staticmethod
    def _checked(handler: Callable[[web.Request], Any]) -> Handler:
        async def checked(request: web.Request) -> web.Response:
            try:
                return cast(web.Response, await handler(request))
            except Refused as exc:  # a query parameter the route does not take
                log.info("admin request refused", path=request.path, reason=exc.reason)
                return fail(exc.status, exc.code, exc.public)

        return checked

    def _oldest(self, since: int) -> int:
        """The earliest end a read may answer: ``since``, but nothing past the retention."""
        retention = self.settings().audit.limits().retention_ms
        return max(since, int(time.time() * 1000) - retention)

    def _integrations(self, wanted: str | None) -> list[str]:
        return [wanted] if wanted else [i.id for i in self.settings().integrations]

    # --- turns -------------------------------------------------------------------------------
    async def turns(self, request: web.Request) -> web.Response:
        q = Query(request)
        integration, chat, session = q.integration(), q.chat(), q.session()
        outcome, since, limit = q.outcome(), q.since(), q.limit(100)
        until, text = q.until(), q.text()
        archived: list[dict[str, Any]] = []
        if self.archive is not None:
            wanted = Filters(
                self._integrations(integration), chat, session, outcome, since, until, text
            )
            archived = await self.archive.turns(wanted, limit=limit)
        if session and not integration:
            integration = await self._integration_of(session)
            if integration is None:
                return ok(archived)
        oldest = self._oldest(since)

        def keep(r: dict[str, Any]) -> bool:
            return (
                (chat is None or r.get("chatId") == chat)
                and (session is None or r.get("sessionId") == session)
                and (outcome is None or r.get("outcome") == outcome)
                and (until is None or int(r["timings"]["finishedAt"]) <= until)
                and matches(r, text)
            )

        index: IndexKind = "ends"
        value = ""
        if session:
            index, value = "session", session
        elif chat:
            index, value = "chat", chat
        elif outcome:
            index, value = "outcome", outcome
        found: list[dict[str, Any]] = []
        for integ in self._integrations(integration):
            found += await self.audit.records(
                integ,
                index=index,
                value=value,
                since_ms=oldest,
                limit=limit,
                keep=keep,
            )
        found = _once(found, archived, "id")
        found.sort(key=lambda r: int(r["timings"]["finishedAt"]), reverse=True)
        return ok(found[:limit])

    async def session_audit(self, request: web.Request) -> web.Response:
        session_id = request.match_info["sessionId"]
        if not SESSION_ID.fullmatch(session_id):
            raise Refused(400, "sessionId: not a valid id")
        q = Query(request)
        limit = q.limit(MAX_LIMIT)
        integration = await self._integration_of(session_id)
        archived: list[dict[str, Any]] = []
        if self.archive is not None:
            wanted = Filters(
                self._integrations(integration), session=session_id, since_ms=q.since()
            )
            archived = await self.archive.turns(wanted, limit=limit, newest_first=False)
        if integration is None and not archived:
            return fail(404, "not_found", "no such session")
        turns: list[dict[str, Any]] = []
        if integration is not None:
            turns = await self.audit.records(
                integration,
                index="session",
                value=session_id,
                since_ms=self._oldest(q.since()),
                limit=limit,
                order="asc",
            )
        turns = _once(turns, archived, "id")
        turns.sort(key=lambda r: int(r["timings"]["finishedAt"]))
        return ok(turns[:limit])

    async def events(self, request: web.Request) -> web.Response:
        q = Query(request)
        limit = q.limit(100)
        event = q.q.get("event") or None
        if event is not None and not re.fullmatch(r"[a-z][a-z.]{0,40}", event):
            raise Refused(400, "event: a name such as session.end, watch.fire or turn")
        # Turn rows are in each integration's stream (and, from older versions, the global
        # one); every other event only in the global stream.
        integrations = self._integrations(None) if event in (None, "turn") else []
        rows = await self.audit.events(limit, integrations, event=event, scan=MAX_LIMIT * 10)
        return ok(rows)

    # --- sessions ----------------------------------------------------------------------------
    async def sessions(self, request: web.Request) -> web.Response:
        q = Query(request)
        integration, chat = q.integration(), q.chat()
        status, outcome, since, limit = q.status(), q.outcome(), q.since(), q.limit(50)
        until, text = q.until(), q.text()
        archived: list[dict[str, Any]] = []
        if self.archive is not None and status != "live":
            asked = Filters(
                self._integrations(integration), chat, None, outcome, since, until, text
            )
            archived = await self.archive.sessions(asked, limit=limit)
        if text:  # a text search is the archive's (Redis keeps no session's words)
            return ok(archived)
        oldest = self._oldest(since)
        wanted: list[tuple[str, str]] = []  # (integration, session id)
        for integ in self._integrations(integration):
            if chat:
                ids = await self.records.of_chat(integ, chat, limit=MAX_LIMIT)
            else:
                # Over-read when filtering by status or outcome: most sessions are not live.
                count = limit if not (status or outcome) else MAX_LIMIT
                ids = [
                    sid for sid, _ in await self.audit.sessions(integ, since_ms=oldest, limit=count)
                ]
            wanted += [(integ, sid) for sid in ids]
        entries = await self._entries(wanted)
        found = [
            e
            for e in entries
            if e["lastActiveAt"] >= oldest
            and (until is None or e["lastActiveAt"] <= until)
            and (status is None or e["live"] == (status == "live"))
            and (outcome is None or e["outcomes"].get(outcome))
        ]
        found = _sessions(found, archived)
        found.sort(key=lambda e: (e["live"], e["lastActiveAt"]), reverse=True)
        return ok(found[:limit])

    async def session(self, request: web.Request) -> web.Response:
        session_id = request.match_info["sessionId"]
        integration = await self._integration_of(session_id)
        entries = await self._entries([(integration, session_id)]) if integration else []
        if self.archive is not None and SESSION_ID.fullmatch(session_id):
            wanted = Filters(self._integrations(integration), session=session_id)
            entries = _sessions(entries, await self.archive.sessions(wanted, limit=1))
        return ok(entries[0]) if entries else fail(404, "not_found", "no such session")

    async def _integration_of(self, session_id: str) -> str | None:
        """The integration of a session: its record says, or (once the record expired, the
        trail being kept longer) the summary an integration's trail keeps of it."""
        if not SESSION_ID.fullmatch(session_id):
            return None
        record = await self.records.get(session_id)
        if record.get("integrationId"):
            return record["integrationId"]
        for integ in self._integrations(None):
            if await self.audit.session_infos(integ, [session_id]):
                return integ
        return None

    async def _entries(self, wanted: list[tuple[str, str]]) -> list[dict[str, Any]]:
        """What the listing says of each session: its record, its audit summary, and whether it
        is the chat's current session (``status`` active | ended) and runs now (``live``)."""
        records = await self.records.get_many([sid for _integ, sid in wanted])
        infos: dict[str, dict[str, Any]] = {}
        for integ in dict.fromkeys(i for i, _ in wanted):
            infos.update(
                await self.audit.session_infos(integ, [s for i, s in wanted if i == integ])
            )
        convs = [
            str(records[n].get("conversation") or infos.get(sid, {}).get("conversation") or "")
            for n, (_i, sid) in enumerate(wanted)
        ]
        now = await self.audit.running([c for c in convs if c])
        out: list[dict[str, Any]] = []
        for (integ, sid), record, conv in zip(wanted, records, convs, strict=True):
            info = infos.get(sid, {})
            if not record and not info:
                continue
            held, binding = now.get(conv, (False, {}))
            current = binding.get("sessionId") == sid
            entry: dict[str, Any] = {
                "sessionId": sid,
                "integrationId": integ,
                "chatId": record.get("chatId") or info.get("chatId"),
                "chatType": record.get("chatType") or info.get("chatType"),
                "xpertId": record.get("xpertId") or info.get("xpertId"),
                **{k: v for k, v in record.items() if k not in ("conversation", "createdAt")},
                "createdAt": int(record.get("createdAt") or info.get("startedAt") or 0),
                "status": "active" if current else "ended",
                "live": held and current,
                "turns": int(info.get("turns") or 0),
                "outcomes": info.get("outcomes") or {},
                "lastOutcome": info.get("lastOutcome"),
                "lastTurnId": info.get("lastTurnId"),
                "lastActiveAt": max(
                    int(info.get("lastActiveAt") or 0),
                    int(binding.get("lastActiveAt") or 0) if current else 0,
                    int(record.get("createdAt") or 0),
                ),
            }
            if current:
                entry["threadId"] = binding.get("threadId")
            out.append(entry)
        return out


def _once(
    live: list[dict[str, Any]], archived: list[dict[str, Any]], key: str
) -> list[dict[str, Any]]:
    """Redis' entries and the archive's not among them."""
    seen = {e[key] for e in live}
    return live + [e for e in archived if e[key] not in seen]


def _sessions(live: list[dict[str, Any]], archived: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Redis' sessions, each completed by its archived row (what Redis no longer counts: turns
    past its retention, the final answer, artifacts), and the archive's others."""
    kept = {e["sessionId"]: e for e in archived}
    out = []
    for entry in live:
        row = kept.pop(entry["sessionId"], None)
        if row is not None and row["turns"] >= entry["turns"]:
            keep = ("status", "live", "threadId")
            entry = {**entry, **row, **{k: entry[k] for k in keep if k in entry}}
            entry["lastActiveAt"] = max(entry["lastActiveAt"], row["lastActiveAt"])
        out.append(entry)
    return out + list(kept.values())
