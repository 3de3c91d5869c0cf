"""DingTalk: an enterprise robot in stream or HTTP mode, AI cards or markdown replies
(docs/dingtalk.md); the attachment download sits with the adapter that owns its client."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog
from aiohttp import web
from yarl import URL

import adapters.dingtalk.inbound as inbound
import adapters.dingtalk.links as links
from adapters.dingtalk.api import NO_PERMISSION, DingTalkApi, DingTalkApiError
from adapters.dingtalk.cards import MAX_CHARS, MAX_PARAM_BYTES
from adapters.dingtalk.connection import STATES, StreamConnection, StreamFrames
from adapters.dingtalk.inbound import DingTalkInbound, RobotAdapter
from adapters.dingtalk.outbound import DingTalkOutbound
from adapters.dingtalk.outbound.ai_card import CardOutbound
from adapters.dingtalk.outbound.robot import Sender, reply_extras
from adapters.dingtalk.settings import DingTalkIntegration
from gateway.config.bases import IntegrationBase
from gateway.edge.capabilities import Capability
from gateway.edge.chat_actions import HISTORY, SEND_FILE, SEND_MESSAGE, post_envelope
from gateway.edge.context import AdapterContext
from gateway.edge.downloads import (
    FetchedFile,
    Origin,
    RedirectRefused,
    body_type,
    get_checked,
    local_origin,
    origin,
    read_body,
)
from gateway.edge.factory import Factory
from gateway.edge.leases import OwnerLease
from gateway.envelope import Attachment, Chat, Envelope
from gateway.progress import Media

log = structlog.get_logger("adapters.dingtalk")

EMAIL_TTL_MS = 86_400_000  # a directory entry rarely changes within a day
NO_EMAIL_TTL_MS = 3_600_000  # none, or a look-up that failed: asked again after an hour
# Without the contact permission every look-up is refused alike: one record for the app keeps
# the monthly API quota (docs/platform-limits.md) from paying a refused call per sender.
DENIED_KEY = "*"


class DingTalkAdapter(RobotAdapter):
    connection_states = STATES
    _email_denied_told: bool  # the missing contact permission was logged (once per replica)

    async def fetch_attachment(
        self, envelope: Envelope, attachment: Attachment, *, max_bytes: int
    ) -> FetchedFile | None:
        return await _fetch(self, attachment, max_bytes)

    async def sender_email(self, envelope: Envelope) -> str | None:
        """The sender's ``email`` (else ``org_email``) from ``topapi/v2/user/get`` by staff id,
        cached in the records store a day (an hour when there is none or the call failed). An
        app without the contact permission (errcode 60011) is told once in the log and not
        asked again for an hour, for any sender."""
        if envelope.sender.email or not self.settings.lookup_sender_email:
            return envelope.sender.email
        staff = str(reply_extras(envelope).get("senderStaffId") or "")
        if not staff:
            return None
        ns = f"dingtalk:{self.settings.id}:email"
        cached = await self.context.records.get(ns, staff)
        if cached is not None:
            return cached or None
        if await self.context.records.get(ns, DENIED_KEY) is not None:
            return None
        try:
            user = await self.api.user(staff)
        except DingTalkApiError as exc:
            if exc.code == NO_PERMISSION:
                await self.context.records.put(ns, DENIED_KEY, "", ttl_ms=NO_EMAIL_TTL_MS)
                if not self._email_denied_told:
                    self._email_denied_told = True
                    log.warning(
                        "sender email unavailable: the app lacks the contact permission",
                        integration_id=self.settings.id,
                        code=exc.code,
                    )
                return None
            log.info(
                "sender email unavailable", integration_id=self.settings.id, **exc.log_fields()
            )
            await self.context.records.put(ns, staff, "", ttl_ms=NO_EMAIL_TTL_MS)
            return None
        email = str(user.get("email") or user.get("org_email") or "")
        await self.context.records.put(
            ns, staff, email, ttl_ms=EMAIL_TTL_MS if email else NO_EMAIL_TTL_MS
        )
        return email or None

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
        self._email_denied_told = False
        self.api: DingTalkApi = DingTalkApi(
            base=settings.base,
            oapi_base=settings.oapi_base,
            client_id=settings.client_id,
            client_secret=secret,
            observe=self.api_calls(),
        )
        self.api.budget = self.platform_budget(settings.client_id)
        sender = Sender(
            integration_id=settings.id,
            robot_code=settings.robot,
            api=self.api,
            records=context.records,
            clock_ms=lambda: int(self.clock() * 1000),
            webhook_origins=settings.webhook_origins,
        )
        cards = (
            CardOutbound(
                integration_id=settings.id,
                robot_code=settings.robot,
                template_id=settings.card_template,
                public=settings.public_card,
                api=self.api,
                records=context.records,
                card_ttl_ms=settings.action_token_ttl_seconds * 1000,
            )
            if settings.card_template
            else None
        )
        self.outbound: DingTalkOutbound = DingTalkOutbound(
            settings=settings,
            sender=sender,
            cards=cards,
            context=context,
            clock=lambda: self.clock(),
        )
        self.inbound = DingTalkInbound(integration_id=settings.id, cards=cards)
        stream = StreamFrames(inbound=self.inbound, ingest_or_spool=context.ingest_or_spool)
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

    @classmethod
    def declared(cls, settings: IntegrationBase) -> frozenset[Capability]:
        """Everything on an AI card but for a card of the operator's own template
        (``cardTemplateId``), which has no buttons for a clarification's options or Confirm /
        Reject (those are typed); markdown messages (``cards: markdown``) show no steps."""
        assert isinstance(settings, DingTalkIntegration)
        if settings.card_template_id:
            return frozenset(Capability) - {Capability.BUTTONS}
        if settings.cards == "markdown":
            return frozenset(Capability) - {Capability.STEPS}
        return frozenset(Capability)

    def answer_part_bytes(self) -> int | None:
        """A robot markdown message's share of a long answer (``MAX_PARAM_BYTES``, and at most
        ``MAX_CHARS`` characters): past ``maxAnswerParts`` of them the answer is a file
        (``sampleFile``)."""
        return MAX_PARAM_BYTES

    def answer_part_chars(self) -> int | None:
        return MAX_CHARS

    def unprompted_chat_id(self, envelope: Envelope) -> str:
        """Direct robot messages go to a staff id (oToMessages/batchSend), not a conversation."""
        if envelope.chat.type == "p2p":
            return str(reply_extras(envelope).get("senderStaffId") or envelope.sender.id)
        return envelope.chat.id

    # --- chat actions: robot messages (markdown) and media; no history or members API -----------
    def chat_tools(self) -> frozenset[str]:
        return frozenset({SEND_MESSAGE, SEND_FILE, HISTORY})

    async def post_file(self, chat: Chat, item: Media, *, idempotency_key: str) -> None:
        env = post_envelope(self.integration_id, self.settings.platform, chat, idempotency_key)
        await self.outbound.media.post(env, item)

    def readiness(self) -> dict[str, Any]:
        if self.connection is None:
            return {"ready": True, "mode": "http"}
        return self.connection.readiness()


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


def setup_routes(app: web.Application, adapters: Mapping[str, DingTalkAdapter]) -> None:
    """The HTTP-mode robot webhook and the markdown messages' button links."""
    inbound.setup_routes(app, adapters)
    links.setup_routes(app, adapters)


factory = Factory(
    platform="dingtalk",
    adapter=DingTalkAdapter,
    settings_model=DingTalkIntegration,
    routes=setup_routes,
)


__all__ = ["DingTalkAdapter", "DingTalkIntegration", "factory"]
