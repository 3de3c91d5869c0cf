"""DingTalk: an enterprise robot in stream or HTTP mode, AI cards or markdown replies (§2)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog
from aiohttp import web
from yarl import URL

from adapters.dingtalk.api import DingTalkApi
from adapters.dingtalk.cards import as_messages, phase, render_messages
from adapters.dingtalk.connection import StreamConnection
from adapters.dingtalk.crypto import sign_action
from adapters.dingtalk.inbound import StreamInbound, setup_routes
from adapters.dingtalk.outbound import CardOutbound, Sender, reply_extras
from adapters.dingtalk.settings import DingTalkIntegration
from gateway.adapter import (
    Adapter,
    AdapterContext,
    FetchedFile,
    LiveAdapters,
    OwnerLease,
    body_type,
    read_body,
)
from gateway.envelope import Attachment, Envelope
from gateway.progress import Progress
from gateway.settings import IntegrationBase

log = structlog.get_logger("adapters.dingtalk")


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
        self, reply_to: Envelope, progress: Progress, handle: str
    ) -> Callable[[str], str] | None:
        """Button links to ``/api/dingtalk/action/…`` with a signed token (needs publicUrl)."""
        base = self.context.public_url
        if not base:
            return None
        extras = reply_extras(reply_to)
        claims = {
            "c": progress.conversation,
            "tu": progress.turn_id,
            "ch": str(extras.get("conversationId") or reply_to.chat.id),
            "g": 1 if reply_to.chat.type == "group" else 0,
            "u": str(extras.get("senderStaffId") or reply_to.sender.id),
            "m": handle,
        }
        secret = self.settings.client_secret.get_secret_value()
        expires = int(self.clock()) + self.settings.action_token_ttl_seconds
        url = f"{base.rstrip('/')}/api/dingtalk/action/{self.integration_id}?t="
        return lambda action: url + sign_action(secret, {**claims, "a": action}, expires_at=expires)

    async def send_card(
        self, reply_to: Envelope, progress: Progress, *, idempotency_key: str
    ) -> str:
        if self.cards is not None:
            card = await self.cards.create(reply_to, progress, idempotency_key)
            if card is not None:
                return card
            # The card reached no chat: this turn is told in markdown messages instead.
        handle = f"md:{idempotency_key}"
        messages = render_messages(progress, self._links(reply_to, progress, handle))
        # A first state that is already final (a turn given up) is claimed as "final", so the
        # update with the same state that follows sends nothing more.
        await self.sender.once(
            f"{idempotency_key}:{phase(progress) or 'start'}", messages, reply_to
        )
        return handle

    async def update_card(self, reply_to: Envelope, handle: str, progress: Progress) -> None:
        if handle.startswith("card:") and self.cards is not None:
            await self.cards.update(handle, progress)
            return
        step = phase(progress)
        if step is None:  # messages can't be edited: intermediate states are not sent
            return
        messages = render_messages(progress, self._links(reply_to, progress, handle))
        await self.sender.once(f"{handle.removeprefix('md:')}:{step}", messages, reply_to)

    async def send_text(self, reply_to: Envelope, text: str, *, idempotency_key: str) -> None:
        title = text.splitlines()[0][:30] if text else "Xpert"
        await self.sender.once(f"text:{idempotency_key}", as_messages(title, text), reply_to)


MAX_REDIRECTS = 3
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def _download_allowed(url: URL, api_base: str) -> bool:
    """A download URL the robot file API handed out: https (port 443, no user info), or the
    origin of ``apiBase`` when that is a local fake. The URL comes from DingTalk's answer, but a
    redirect from it must not take the gateway to plain http or a port of the operator's
    network."""
    base = URL(api_base)
    if base.host in LOCAL_HOSTS and (url.scheme, url.host, url.port) == (
        base.scheme,
        base.host,
        base.port,
    ):
        return True
    return url.scheme == "https" and url.port == 443 and url.user is None and bool(url.host)


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
    try:
        url: URL | None = URL(str(link))
    except ValueError:
        url = None
    for _ in range(MAX_REDIRECTS + 1):
        if url is None or not url.is_absolute() or not _download_allowed(url, adapter.api.base):
            log.warning(
                "attachment download refused: not an https URL",
                integration_id=adapter.integration_id,
                host=url.host if url is not None else None,
            )
            return None
        async with adapter.api.http.get(url, allow_redirects=False) as resp:
            if resp.status in (301, 302, 303, 307, 308):
                try:
                    url = url.join(URL(resp.headers.get("Location", "")))
                except ValueError:
                    url = None
                continue
            data = await read_body(resp, max_bytes) if resp.status == 200 else None
            mime = body_type(resp)
        return FetchedFile(data=data, mime=mime, name=attachment.name) if data is not None else None
    log.warning("attachment download redirected too often", integration_id=adapter.integration_id)
    return None


class DingTalkAdapterFactory:
    platform = "dingtalk"
    settings_model: type[IntegrationBase] = DingTalkIntegration

    def create(self, *, settings: IntegrationBase, context: AdapterContext) -> Adapter:
        assert isinstance(settings, DingTalkIntegration)
        return DingTalkAdapter(settings=settings, context=context)

    def setup_routes(self, app: web.Application, adapters: Mapping[str, Adapter]) -> None:
        setup_routes(app, LiveAdapters(adapters, DingTalkAdapter))


__all__ = ["DingTalkAdapter", "DingTalkAdapterFactory", "DingTalkIntegration"]
