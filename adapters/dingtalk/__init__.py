"""DingTalk: an enterprise robot in stream or HTTP mode, AI cards or markdown replies (§2).
(Over 300 lines: the markdown path's private Confirm / Reject links sit with the links they
withhold from the group, and the attachment download with the adapter that owns its client.)"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog
from aiohttp import web
from yarl import URL

from adapters.dingtalk.api import DingTalkApi
from adapters.dingtalk.cards import (
    Message,
    as_messages,
    phase,
    private_message,
    render_messages,
)
from adapters.dingtalk.connection import StreamConnection
from adapters.dingtalk.crypto import sign_action
from adapters.dingtalk.inbound import StreamInbound, setup_routes
from adapters.dingtalk.outbound import CardOutbound, Sender, reply_extras, target
from adapters.dingtalk.settings import DingTalkIntegration
from gateway.config.bases import IntegrationBase
from gateway.edge.adapter import (
    Adapter,
    AdapterContext,
    FetchedFile,
    LiveAdapters,
    Origin,
    OwnerLease,
    RedirectRefused,
    answerers,
    body_type,
    get_checked,
    local_origin,
    origin,
    read_body,
)
from gateway.envelope import Attachment, Envelope
from gateway.progress import (
    ACTION_CONFIRM,
    ACTION_REJECT,
    ACTION_ROUTINE_CANCEL,
    ACTION_ROUTINE_CONFIRM,
    Progress,
)

log = structlog.get_logger("adapters.dingtalk")

# Buttons only certain people may answer (gateway/turns/approval.py, triggers/routines.py). A
# link acts as the person its token names, so in a group these links never go into the chat:
# each person who may answer gets their own, signed for them, in a 1:1 robot message.
ANSWERS = frozenset({ACTION_CONFIRM, ACTION_REJECT})
ROUTINE_ANSWERS = frozenset({ACTION_ROUTINE_CONFIRM, ACTION_ROUTINE_CANCEL})
PRIVATE = ANSWERS | ROUTINE_ANSWERS


class DingTalkAdapter(Adapter):
    settings: DingTalkIntegration

    async def fetch_attachment(
        self, envelope: Envelope, attachment: Attachment, *, max_bytes: int
    ) -> FetchedFile | None:
        return await _fetch(self, attachment, max_bytes)

    def __init__(
        self,
        *,
        settings: DingTalkIntegration,
        context: AdapterContext,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(settings=settings, context=context)
        self.clock = clock
        secret = settings.client_secret.get_secret_value()
        self.api = DingTalkApi(
            base=settings.base,
            client_id=settings.client_id,
            client_secret=secret,
            observe=self.api_calls(),
        )
        self.sender = Sender(
            integration_id=settings.id,
            robot_code=settings.robot,
            api=self.api,
            records=context.records,
            clock_ms=lambda: int(self.clock() * 1000),
            webhook_origins=settings.webhook_origins,
        )
        self.cards = (
            CardOutbound(
                integration_id=settings.id,
                robot_code=settings.robot,
                template_id=settings.card_template_id,
                api=self.api,
                records=context.records,
                card_ttl_ms=settings.action_token_ttl_seconds * 1000,
            )
            if settings.card_template_id
            else None
        )
        stream = StreamInbound(self)
        self.connection = (
            StreamConnection(
                api_base=settings.base,
                client_id=settings.client_id,
                client_secret=secret,
                integration_id=settings.id,
                on_message=stream.robot_message,
                on_card=stream.card_callback,
                lease=OwnerLease.for_connection(
                    context.records,
                    platform="dingtalk",
                    account=settings.client_id,
                    ttl_ms=context.connection_lease_ms,
                ),
            )
            if settings.connection_mode == "stream"
            else None
        )

    # --- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        if self.connection is not None:
            self.connection.begin()

    async def stop(self) -> None:
        if self.connection is not None:
            await self.connection.close()
        await self.api.close()

    def unprompted_chat_id(self, envelope: Envelope) -> str:
        """Direct robot messages go to a staff id (oToMessages/batchSend), not a conversation."""
        if envelope.chat.type == "p2p":
            return str(reply_extras(envelope).get("senderStaffId") or envelope.sender.id)
        return envelope.chat.id

    def readiness(self) -> dict[str, Any]:
        if self.connection is None:
            return {"ready": True, "mode": "http"}
        return self.connection.readiness()

    # --- outbound ------------------------------------------------------------------------
    def _links(
        self, reply_to: Envelope, progress: Progress, handle: str, user: str | None = None
    ) -> Callable[[str], str] | None:
        """Button links to ``/api/dingtalk/action/…`` with a signed token (needs publicUrl),
        acting as the asker, or as ``user`` (the person a private link is sent to)."""
        base = self.context.public_url
        if not base:
            return None
        extras = reply_extras(reply_to)
        claims = {
            "c": progress.conversation,
            "tu": progress.turn_id,
            "ch": str(extras.get("conversationId") or reply_to.chat.id),
            "g": 1 if reply_to.chat.type == "group" else 0,
            "u": user or str(extras.get("senderStaffId") or reply_to.sender.id),
            "m": handle,
        }
        secret = self.settings.client_secret.get_secret_value()
        expires = int(self.clock()) + self.settings.action_token_ttl_seconds
        url = f"{base.rstrip('/')}/api/dingtalk/action/{self.integration_id}?t="
        return lambda action: url + sign_action(secret, {**claims, "a": action}, expires_at=expires)

    async def _messages(
        self, reply_to: Envelope, progress: Progress, handle: str, key: str
    ) -> list[Message]:
        """The markdown message(s) of one state, sent under ``key``. In a group, Confirm /
        Reject go privately to each person who may answer (``_ask_privately``), and the group
        is told who was asked; Stop, Retry and New stay, as anyone there may /stop or /new."""
        links = self._links(reply_to, progress, handle)
        private = PRIVATE & {b.action_id for b in progress.buttons}
        if links is None or not private or not target(reply_to)[0]:
            return render_messages(progress, links)
        note = await self._ask_privately(reply_to, progress, handle, key, frozenset(private))
        return render_messages(progress, links, withheld=PRIVATE, note=note)

    async def _ask_privately(
        self,
        reply_to: Envelope,
        progress: Progress,
        handle: str,
        key: str,
        actions: frozenset[str],
    ) -> str:
        """Send ``actions``' links to each person who may answer, each signed for them; the
        group's note saying who was asked, or that it could not be delivered."""
        people = answerers(self.settings, reply_to, routine=not actions & ANSWERS)
        if not people:
            return "*Nobody in this chat may answer this: approvers are set in the config.*"
        asker = reply_to.sender.id if reply_to.kind not in ("schedule", "event") else None
        name = {asker: reply_to.sender.name or asker} if asker else {}
        chat = reply_to.chat.name
        asked_in = f"the group chat “{chat}”" if chat else "a group chat"
        reached: list[str] = []
        missed: list[str] = []
        for person in people:
            links = self._links(reply_to, progress, handle, user=person)
            assert links is not None
            message = private_message(progress, links, actions=actions, asked_in=asked_in)
            ok = await self.sender.to_user_once(f"{key}:dm:{person}", person, message)
            (reached if ok else missed).append(name.get(person, person))
        answer = "Confirm or Reject" if actions & ANSWERS else "Confirm or Cancel"
        if reached and not missed:
            who = " or ".join(reached)
            return f"*Waiting for {who} to {answer} (sent to them privately).*"
        failed = (
            f"*{answer} could not be sent privately to {', '.join(missed)}: DingTalk refused "
            "the direct message. To answer, open a direct chat with this bot (so it may write "
            "to you), then ask again here; if that does not help, its admin may check the "
            "bot's permission to send direct messages.*"
        )
        if not reached:
            return failed
        return f"*Waiting for {' or '.join(reached)} to {answer} (sent privately).* {failed}"

    async def send_card(
        self, reply_to: Envelope, progress: Progress, *, idempotency_key: str
    ) -> str:
        if self.cards is not None:
            card = await self.cards.create(reply_to, progress, idempotency_key)
            if card is not None:
                return card
            # The card reached no chat: this turn is told in markdown messages instead.
        handle = f"md:{idempotency_key}"
        # A first state that is already final (a turn given up) is claimed as "final", so the
        # update with the same state that follows sends nothing more.
        key = f"{idempotency_key}:{phase(progress) or 'start'}"
        messages = await self._messages(reply_to, progress, handle, key)
        await self.sender.once(key, messages, reply_to)
        return handle

    async def update_card(self, reply_to: Envelope, handle: str, progress: Progress) -> None:
        if handle.startswith("card:") and self.cards is not None:
            await self.cards.update(handle, progress)
            return
        step = phase(progress)
        if step is None:  # messages can't be edited: intermediate states are not sent
            return
        key = f"{handle.removeprefix('md:')}:{step}"
        messages = await self._messages(reply_to, progress, handle, key)
        await self.sender.once(key, messages, reply_to)

    async def send_text(self, reply_to: Envelope, text: str, *, idempotency_key: str) -> None:
        title = text.splitlines()[0][:30] if text else "Xpert"
        await self.sender.once(f"text:{idempotency_key}", as_messages(title, text), reply_to)


def _download_allowed(fake: Origin | None) -> Callable[[URL], bool]:
    """A download URL the robot file API handed out: https (port 443, no user info), or the
    origin of ``apiBase`` when that is a local fake. The URL comes from DingTalk's answer, but a
    redirect from it must not take the gateway to plain http or a port of the operator's
    network."""

    def allowed(url: URL) -> bool:
        if fake is not None and origin(url) == fake:
            return True
        return url.scheme == "https" and url.port == 443 and url.user is None and bool(url.host)

    return allowed


async def _fetch(
    adapter: DingTalkAdapter, attachment: Attachment, max_bytes: int
) -> FetchedFile | None:
    """A robot message file: its downloadCode buys a short-lived URL (robot file API). Redirects
    are followed by hand, at most three, each checked like the URL itself."""
    result = await adapter.api.call(
        "POST",
        "/v1.0/robot/messageFiles/download",
        {"downloadCode": attachment.key, "robotCode": adapter.settings.robot},
    )
    link = result.get("downloadUrl")
    if not link:
        return None
    allowed = _download_allowed(local_origin(adapter.api.base))
    try:
        async with get_checked(adapter.api.http, str(link), allowed) as resp:
            data = await read_body(resp, max_bytes) if resp.status == 200 else None
            mime = body_type(resp)
    except RedirectRefused as exc:
        log.warning(
            "attachment download refused: not an https URL",
            integration_id=adapter.integration_id,
            host=exc.host,
            reason=exc.reason,
        )
        return None
    return FetchedFile(data=data, mime=mime, name=attachment.name) if data is not None else None


class DingTalkAdapterFactory:
    platform = "dingtalk"
    settings_model: type[IntegrationBase] = DingTalkIntegration

    def create(self, *, settings: IntegrationBase, context: AdapterContext) -> Adapter:
        assert isinstance(settings, DingTalkIntegration)
        return DingTalkAdapter(settings=settings, context=context)

    def setup_routes(self, app: web.Application, adapters: Mapping[str, Adapter]) -> None:
        setup_routes(app, LiveAdapters(adapters, DingTalkAdapter))


__all__ = ["DingTalkAdapter", "DingTalkAdapterFactory", "DingTalkIntegration"]
