"""Schedules made in a chat: ``/schedule <cron> <text>``, ``/schedules``, ``/unschedule <n>``, and
routines said in plain words ("每天 9 点总结本群"), which wait for a Confirm on a card first.

Who may: in a direct chat the user; in a group everyone, unless the integration lists
``scheduleAdmins`` (then only they - the rule of ``memoryAdmins``). A routine's Confirm / Cancel
is for the person who asked or a schedule admin. The pending routine lives in Redis for an hour
under a token its buttons carry (as the card's turn id); the first click takes it, so a second
click changes nothing.

``RoutinePhrases`` is the intake chain's handler of a routine said in plain words; the commands
and the Confirm / Cancel clicks come through the chat commands and buttons handlers
(``gateway.intake``).
"""

from __future__ import annotations

import functools
import json
import secrets
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from gateway.config.bases import IntegrationBase
from gateway.config.cron import Cron, CronError, split_command
from gateway.config.settings import Settings
from gateway.edge.adapter import Adapter
from gateway.edge.ingest import IngestOutcome
from gateway.envelope import Envelope
from gateway.errors import Refused
from gateway.intake.router import Incoming
from gateway.progress import ACTION_ROUTINE_CANCEL, ACTION_ROUTINE_CONFIRM, Button, Progress
from gateway.triggers.phrases import USAGE_TEXT, RoutineSpec, Unrecognised, parse_routine
from gateway.triggers.schedule_book import Entry, ScheduleBook, too_often
from sessions import ScheduleStore, SessionStore

log = structlog.get_logger("gateway.schedules")

ROUTINE_TTL_MS = 3_600_000
USAGE = "Usage: /schedule <cron> <text> - 5 cron fields, or 6 with seconds first\n" + USAGE_TEXT
NOT_ALLOWED = "Only this chat's schedule admins can change its schedules."


def _when(cron: Cron, after_ms: int, count: int) -> str:
    return ", ".join(t.strftime("%Y-%m-%d %H:%M:%S %Z") for t in cron.upcoming(after_ms, count))


class ChatSchedules:
    def __init__(
        self,
        *,
        book: Callable[[], ScheduleBook],
        sessions: SessionStore,
        adapters: Mapping[str, Adapter],
        reply: Callable[[Envelope, str], None],
        spawn: Callable[[Any], None],
        clock: Callable[[], int],
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self._book = book
        self.sessions = sessions
        self.adapters = adapters
        self.reply = reply
        self.spawn = spawn
        self.clock = clock
        self.on_change = on_change  # a schedule was made or removed: the scheduler's wake

    @classmethod
    def of(
        cls,
        *,
        store: SessionStore,
        settings: Callable[[], Settings],
        adapters: Mapping[str, Adapter],
        reply: Callable[[Envelope, str], None],
        spawn: Callable[[Any], None],
        clock: Callable[[], int],
        on_change: Callable[[], None] = lambda: None,
    ) -> ChatSchedules:
        """The pipeline's: schedules in the same Redis as the sessions."""

        def book() -> ScheduleBook:
            schedules = ScheduleStore(client=store.redis, keys=store.keys)
            return ScheduleBook(store=schedules, settings=settings, clock=clock)

        return cls(
            book=book,
            sessions=store,
            adapters=adapters,
            reply=reply,
            spawn=spawn,
            clock=clock,
            on_change=on_change,
        )

    @functools.cached_property
    def book(self) -> ScheduleBook:
        """Made on first use (a pipeline built on a stand-in store never needs it)."""
        return self._book()

    @staticmethod
    def may_change(integ: IntegrationBase, env: Envelope) -> bool:
        admins = integ.schedule_admins
        return env.chat.type == "p2p" or not admins or env.sender.id in admins

    def _chat_id(self, env: Envelope) -> str:
        adapter = self.adapters.get(env.integration_id)
        return adapter.unprompted_chat_id(env) if adapter is not None else env.chat.id

    async def _chat_entries(self, integ: IntegrationBase, env: Envelope) -> list[Entry]:
        chats = {env.chat.id, self._chat_id(env)}
        return [e for e in await self.book.entries(integ.id) if e.schedule.chat_id in chats]

    # --- /schedule, /schedules, /unschedule --------------------------------------------------
    async def command(self, integ: IntegrationBase, env: Envelope, name: str, rest: str) -> None:
        if name == "schedules":
            self.reply(env, self._listing(await self._chat_entries(integ, env)))
            return
        if not self.may_change(integ, env):
            self.reply(env, NOT_ALLOWED)
            return
        if name == "schedule":
            await self._schedule(integ, env, rest)
        else:
            await self._unschedule(integ, env, rest.strip())

    def _listing(self, entries: list[Entry]) -> str:
        if not entries:
            return "No schedules in this chat. /schedule <cron> <text> makes one."
        now, lines = self.clock(), []
        for i, e in enumerate(entries, 1):
            nxt = e.next_fire(now)
            when = "disabled" if not e.schedule.enabled else "cannot fire"
            if nxt is not None and e.cron is not None:
                when = "next " + e.cron.upcoming(nxt - 1, 1)[0].strftime("%Y-%m-%d %H:%M:%S %Z")
            origin = " (config file)" if e.source == "config" else ""
            lines.append(f"{i}. {e.schedule.cron} ({e.zone}) {e.schedule.text} - {when}{origin}")
        return "This chat's schedules:\n" + "\n".join(lines)

    async def _schedule(self, integ: IntegrationBase, env: Envelope, rest: str) -> None:
        try:
            cron_text, text = split_command(rest)
        except CronError as exc:
            self.reply(env, f"{exc}\n{USAGE}")
            return
        await self._create(integ, env, {"cron": cron_text, "text": text, "source": "chat"})

    async def _create(
        self, integ: IntegrationBase, env: Envelope, fields: dict[str, Any]
    ) -> str | None:
        """Make the chat's runtime schedule; says what happened in the chat; the id, or None."""
        try:
            refused = too_often(integ, Cron.parse(str(fields["cron"])))
        except CronError:
            refused = None  # the book says what is wrong with it
        if refused is not None:
            log.info("schedule refused: fires too often", source=fields["source"])
            self.reply(env, f"Not scheduled: {refused}.")
            return None
        data = {
            "integrationId": integ.id,
            "chatId": self._chat_id(env),
            "chatType": env.chat.type,
            "createdBy": env.sender.id,
            **fields,
        }
        try:
            schedule = await self.book.create(data)
        except Refused as exc:
            self.reply(env, f"Not scheduled: {exc.reason}")
            return None
        self.on_change()
        if fields["source"] == "chat":
            cron = schedule.parsed(self.book.settings())
            self.reply(
                env,
                f"Scheduled: {schedule.cron} ({cron.tz.key}) {schedule.text}\n"
                f"Next: {_when(cron, self.clock(), 3)}",
            )
        return schedule.id

    async def _unschedule(self, integ: IntegrationBase, env: Envelope, rest: str) -> None:
        entries = await self._chat_entries(integ, env)
        if not (rest.isascii() and rest.isdigit() and 1 <= int(rest) <= len(entries)):
            self.reply(env, "Usage: /unschedule <n> (see /schedules for the numbers)")
            return
        entry = entries[int(rest) - 1]
        try:
            await self.book.delete(entry.schedule.id)
        except Refused as exc:
            self.reply(env, f"Not removed: {exc.reason}")
            return
        self.reply(env, f"Removed schedule {rest}: {entry.schedule.cron} {entry.schedule.text}")

    # --- routines said in plain words ----------------------------------------------------------
    async def offer(
        self, integ: IntegrationBase, env: Envelope, conversation: str
    ) -> IngestOutcome | None:
        """A message addressed to the bot that asks for a routine: a confirmation card instead
        of a turn. None: not a routine request (a normal message)."""
        spec = parse_routine(env.text)
        if spec is None:
            return None
        if not await self.sessions.mark_seen(conversation, env.event_id, self.clock()):
            return IngestOutcome("duplicate")
        log.info("routine asked", recognised=isinstance(spec, RoutineSpec))
        if isinstance(spec, Unrecognised):
            self.reply(env, f"{spec.reason}\n\n{USAGE_TEXT}")
            return IngestOutcome("handled", "routine not recognised")
        if not self.may_change(integ, env):
            self.reply(env, NOT_ALLOWED)
            return IngestOutcome("handled", "routine refused")
        zone = spec.timezone or integ.timezone or "UTC"
        try:
            cron = Cron.parse(spec.cron, zone)
        except CronError as exc:
            self.reply(env, f"{exc}\n\n{USAGE_TEXT}")
            return IngestOutcome("handled", "routine not recognised")
        refused = too_often(integ, cron)
        if refused is not None:
            log.info("routine refused: fires too often")
            self.reply(env, f"Not scheduled: {refused}.")
            return IngestOutcome("handled", "routine too often")
        token = secrets.token_hex(12)
        fields = {"cron": cron.expr, "text": spec.text, "timezone": spec.timezone}
        record = {"by": env.sender.id, "fields": fields, "envelope": env.to_json()}
        store = self.book.store
        await store.put_routine(token, json.dumps(record), ttl_ms=ROUTINE_TTL_MS)
        body = (
            f"**{spec.description}**: {spec.text}\n\n"
            f"Cron: `{cron.expr}` · time zone: {zone}\n\n"
            f"Next: {_when(cron, self.clock(), 3)}"
        )
        progress = Progress(
            turn_id=token,
            conversation=conversation,
            status="waiting",
            prompt="Schedule this routine?",
            answer=body,
            actions=(
                Button(ACTION_ROUTINE_CONFIRM, "Confirm", "primary"),
                Button(ACTION_ROUTINE_CANCEL, "Cancel"),
            ),
        )
        adapter = self.adapters.get(env.integration_id)
        if adapter is not None:
            self.spawn(self._show(adapter, env, progress, token, record))
        return IngestOutcome("handled", "routine")

    async def _show(
        self,
        adapter: Adapter,
        env: Envelope,
        progress: Progress,
        token: str,
        record: dict[str, Any],
    ) -> None:
        handle = await adapter.send_card(env, progress, idempotency_key=f"{env.event_id}#routine")
        record["handle"], record["body"] = handle, progress.answer
        await self.book.store.put_routine(
            token, json.dumps(record), ttl_ms=ROUTINE_TTL_MS, only_if_there=True
        )

    async def click(
        self, integ: IntegrationBase, env: Envelope, conversation: str
    ) -> IngestOutcome:
        """Confirm: the runtime schedule is made and the card says Scheduled; Cancel: the card
        says Cancelled. Only the first click of the asker (or a schedule admin) counts."""
        assert env.action is not None
        token = str(env.action.value.get("turnId") or "")
        if not await self.sessions.mark_seen(conversation, env.event_id, self.clock()):
            return IngestOutcome("duplicate")
        raw = await self.book.store.routine(token) if token else None
        if raw is None:
            return IngestOutcome("ignored", "routine already answered or expired")
        record = json.loads(raw)
        admins = integ.schedule_admins
        if env.sender.id != record["by"] and env.sender.id not in admins:
            self.reply(env, "Only the person who asked, or a schedule admin, can answer this.")
            return IngestOutcome("handled", "routine click refused")
        if await self.book.store.take_routine(token) is None:
            return IngestOutcome("ignored", "routine already answered")
        asked = Envelope.from_json(record["envelope"])
        body = str(record.get("body") or "")
        if env.action.id == ACTION_ROUTINE_CANCEL:
            log.info("routine cancelled")
            await self._update(asked, env, record, token, conversation, "Cancelled", body)
            return IngestOutcome("handled", "routine cancelled")
        fields = {**record["fields"], "source": "routine"}
        schedule_id = await self._create(integ, asked, fields)
        if schedule_id is None:
            await self._update(asked, env, record, token, conversation, "Not scheduled", body)
            return IngestOutcome("handled", "routine not scheduled")
        log.info("routine scheduled", schedule_id=schedule_id)
        text = f"{body}\n\nSchedule id: {schedule_id} (/schedules lists it)"
        await self._update(asked, env, record, token, conversation, "Scheduled", text)
        return IngestOutcome("handled", "routine scheduled")

    async def _update(
        self,
        asked: Envelope,
        click: Envelope,
        record: dict[str, Any],
        token: str,
        conversation: str,
        headline: str,
        body: str,
    ) -> None:
        adapter = self.adapters.get(asked.integration_id)
        handle = record.get("handle") or (click.action.message_id if click.action else None)
        if adapter is None or not handle:
            self.reply(click, headline)
            return
        final = Progress(
            turn_id=token,
            conversation=conversation,
            status="cancelled" if headline != "Scheduled" else "done",
            answer=body,
            headline=headline,
            actions=(),
            version=1,
        )
        self.spawn(adapter.update_card(asked, str(handle), final))


class RoutinePhrases:
    """The handler of a message (not a command) addressed to the bot that may ask for a
    routine: a confirmation card instead of a turn; None when it asks for none."""

    def __init__(self, schedules: ChatSchedules) -> None:
        self.schedules = schedules

    def matches(self, incoming: Incoming) -> bool:
        return incoming.env.kind == "message" and incoming.command is None

    async def handle(self, incoming: Incoming) -> IngestOutcome | None:
        return await self.schedules.offer(incoming.integ, incoming.env, incoming.conversation)
