"""The context a turn hands its expert, built once: the merged input, ``sys.*`` and the
conversation variables, the chat's memory, recent group messages, attachments (fetched for
experts that take pictures) and the sender's email."""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

import structlog

from gateway.adapter import Adapter
from gateway.envelope import Envelope
from gateway.experts import Expert, TurnInput
from gateway.turns.binding import Session
from gateway.turns.prefetch import ContextPrefetch
from gateway.variables import system_variables
from sessions import SessionRecords

log = structlog.get_logger("gateway.turns")

MAX_ATTACHMENT_BYTES = 10 * 1024 * 1024


def merge_input(items: list[Envelope]) -> str:
    """One line per message (a scheduled turn's or an external event's text counts as one); in a
    group with several speakers, or with a watch's match, each line names its speaker; a watch's
    or an event source's instruction goes first, once (gateway/triggers/watch.py, external.py)."""
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
            thread_id=reply_to.chat.thread_id,
            attachments=await _attachments(adapter, request.items, expert),
            variables=variables,
            state=dict(context.variables),
            backend_state=context.backend,
            declared_variables={d.name: d.reducer for d in session.snapshot.declared},
            expert_thread_id=session.thread_id,
            group_history=tuple(group),
            memory_rules=len(context.memory),
            seen_before=context.seen,
        )


async def _sender_email(adapter: Adapter, envelope: Envelope) -> str | None:
    """The sender's email where the adapter can tell; a look-up that fails costs only it."""
    try:
        return await adapter.sender_email(envelope)
    except Exception as exc:
        log.warning("sender email lookup failed", error=str(exc))
        return envelope.sender.email


async def _attachments(
    adapter: Adapter, items: tuple[Envelope, ...], expert: Expert
) -> tuple[dict[str, Any], ...]:
    """The turn's attachments; pictures are fetched through the adapter (as data URLs) for
    experts that take them, up to 10 MB each."""
    out: list[dict[str, Any]] = []
    for envelope in items:
        for attachment in envelope.attachments:
            entry = attachment.model_dump(by_alias=True, exclude_none=True)
            if expert.accepts_images and attachment.kind == "image" and not attachment.url:
                try:
                    fetched = await adapter.fetch_attachment(
                        envelope, attachment, max_bytes=MAX_ATTACHMENT_BYTES
                    )
                except Exception as exc:
                    log.warning("attachment download failed", error=str(exc))
                    fetched = None
                if fetched is not None:
                    encoded = base64.b64encode(fetched.data).decode()
                    entry["url"] = f"data:{fetched.mime};base64,{encoded}"
                    entry["size"] = len(fetched.data)
            out.append(entry)
    return tuple(out)
