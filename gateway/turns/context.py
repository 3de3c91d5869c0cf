"""The context a turn hands its expert, built once: the merged input, ``sys.*`` and the
conversation variables, the chat's memory, recent group messages, attachments (fetched for
experts that take pictures or read files: gateway/turns/attachments.py) and the sender's
email."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

import structlog

from gateway.edge.adapter import Adapter
from gateway.envelope import Envelope
from gateway.errors import unwatched
from gateway.experts.base import Expert, TurnInput
from gateway.turns.attachments import collect
from gateway.turns.binding import Session
from gateway.turns.prefetch import ContextPrefetch
from gateway.turns.variables import system_variables
from sessions import SessionRecords

log = structlog.get_logger("gateway.turns")
EMAIL_WAIT_S = 2.0  # a sender's email is waited for this long at most


def merge_input(items: list[Envelope]) -> str:
    """One line per message (a scheduled turn's or an external event's text counts as one); in a
    group with several speakers, or with a watch's match, each line names its speaker; a watch's
    or an event source's instruction goes first, once (gateway/config/watch.py, external.py)."""
    messages = [e for e in items if e.kind in ("message", "schedule", "event", "watch")]
    speakers = {e.sender.id for e in messages}
    watched = any(e.kind == "watch" for e in messages)
    instructions = [e.trigger.text for e in messages if e.kind in ("watch", "event") and e.trigger]
    if messages and messages[-1].chat.type == "group" and (len(speakers) > 1 or watched):
        lines = "\n".join(f"{e.sender.name or e.sender.id}: {e.text}" for e in messages)
    else:
        lines = "\n".join(e.text for e in messages)
    return "\n\n".join([*dict.fromkeys(t for t in instructions if t), lines])


@dataclass(frozen=True)
class TurnRequest:
    """What the turn answers: its id, its text and the messages it came from."""

    turn_id: str
    text: str
    reply_to: Envelope  # the message the card answers (the newest of the burst)
    sender: Envelope  # who acts: the sender, or the clicker of a Confirm / Reject
    items: tuple[Envelope, ...] = ()  # messages whose attachments go along
    group_since_ms: int | None = None  # read recent unmentioned group messages since then
    history_limit: int = 0
    max_attachments: int = 10  # the integration's maxAttachmentsPerTurn
    max_attachment_bytes: int = 20 * 1024 * 1024  # its maxAttachmentBytesPerTurn


class ContextBuilder:
    def __init__(self, *, records: SessionRecords, prefetch: ContextPrefetch | None = None) -> None:
        self.records = records
        self.prefetch = prefetch  # reads sent with the turn's claim (gateway/turns/prefetch.py)

    async def build(
        self,
        request: TurnRequest,
        session: Session,
        adapter: Adapter,
        expert: Expert,
        *,
        first_card: Awaitable[Any] | None = None,
    ) -> TurnInput:
        """One round trip for the stored context, alongside the sender's email look-up and
        (when given) the first card, which goes out meanwhile."""
        reply_to, options = request.reply_to, session.snapshot.options
        since = request.group_since_ms
        reads = None
        if self.prefetch is not None and since is None:
            reads = self.prefetch.take(request.turn_id, options.id, reply_to.chat.id, session.id)
        if reads is None:
            reads = self.records.context_reads(
                options.id, reply_to.chat.id, session.id, group_since_ms=since
            )
        try:
            try:
                email = await _sender_email(adapter, reply_to)  # meanwhile, in this task
            finally:
                raw = await reads
        finally:
            if first_card is not None:
                await first_card
        context = self.records.context_of(raw, group_since_ms=since)
        variables = system_variables(
            language=options.language,
            locale=reply_to.locale,
            timezone=options.timezone,
            thread_id=session.thread_id or session.id,
            user_id=reply_to.sender.id,
            user_email=email,
            project_id=options.project_id,
            workspace_base_url=options.workspace_base_url,
        )
        variables.update(
            {
                f"var.{k}": v if isinstance(v, str) else json.dumps(v)
                for k, v in context.variables.items()
            }
        )
        if context.memory:
            variables["memory.rules"] = "\n".join(
                f"{i}. {item['text']}" for i, item in enumerate(context.memory, 1)
            )
        group = context.group[-request.history_limit :] if request.history_limit else []
        attachments, notices = await collect(
            adapter,
            expert,
            request.items,
            max_count=request.max_attachments,
            max_bytes=request.max_attachment_bytes,
        )
        return TurnInput(
            turn_id=request.turn_id,
            session_id=session.id,
            integration_id=options.id,
            xpert_id=session.snapshot.xpert_id,
            text=request.text,
            chat_id=reply_to.chat.id,
            chat_type=reply_to.chat.type,
            sender_id=request.sender.sender.id,
            sender_name=request.sender.sender.name,
            sender_verified=adapter.verifies_senders,
            senders=tuple(
                dict.fromkeys([request.sender.sender.id, *(e.sender.id for e in request.items)])
            ),
            thread_id=reply_to.chat.thread_id,
            attachments=attachments,
            notices=notices,
            variables=variables,
            state=dict(context.variables),
            backend_state=context.backend,
            declared_variables={d.name: d.reducer for d in session.snapshot.declared},
            expert_thread_id=session.thread_id,
            expert_threads=session.threads,
            group_history=tuple(group),
            memory_rules=len(context.memory),
            seen_before=context.seen,
            project_id=options.project_id,
        )


async def _sender_email(adapter: Adapter, envelope: Envelope) -> str | None:
    """The sender's email where the adapter can tell; a look-up that fails costs only it, and
    one that takes longer than ``EMAIL_WAIT_S`` (a directory API at its platform limit) is not
    waited for: the turn goes on without it, and the look-up, left to finish, fills the
    adapter's cache for the sender's next turn."""
    if type(adapter).sender_email is Adapter.sender_email:  # nothing to look up (the console)
        return envelope.sender.email
    lookup = asyncio.ensure_future(adapter.sender_email(envelope))
    lookup.add_done_callback(unwatched)  # its failure is of no use once the turn went on
    try:
        return await asyncio.wait_for(asyncio.shield(lookup), EMAIL_WAIT_S)
    except TimeoutError:
        log.info("sender email look-up slow; the turn goes on without it")
        return envelope.sender.email
    except Exception as exc:
        log.warning("sender email lookup failed", error=str(exc))
        return envelope.sender.email
