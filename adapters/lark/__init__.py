"""Lark / Feishu: webhook or long connection in, live cards and button callbacks out (issue 3)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import structlog

from adapters.lark.api import LarkApi, LarkApiError
from adapters.lark.cards import TEXT_PART_BYTES
from adapters.lark.connection import STATES, LongConnection
from adapters.lark.inbound import LarkBot, LarkInbound, setup_routes
from adapters.lark.outbound import LarkOutbound
from adapters.lark.outbound.actions import LarkChatActions
from adapters.lark.settings import LarkIntegration
from gateway.config.bases import IntegrationBase
from gateway.edge.capabilities import Capability
from gateway.edge.chat_actions import TOOLS, ChatMember, ChatMessage
from gateway.edge.context import AdapterContext
from gateway.edge.downloads import FetchedFile
from gateway.edge.factory import Factory
from gateway.envelope import Attachment, Chat, Envelope
from gateway.progress import Media

log = structlog.get_logger("adapters.lark")

EMAIL_TTL_MS = 86_400_000  # a directory entry rarely changes within a day
NO_EMAIL_TTL_MS = 3_600_000  # none (or no permission): asked again after an hour


class LarkAdapter(LarkBot):
    connection_states = STATES

    async def fetch_attachment(
        self, envelope: Envelope, attachment: Attachment, *, max_bytes: int
    ) -> FetchedFile | None:
        message_id = envelope.reply_to.message_id if envelope.reply_to else None
        if not message_id:
            return None
        kind = "image" if attachment.kind == "image" else "file"
        data, mime = await self.api.resource(message_id, attachment.key, kind, max_bytes=max_bytes)
        return FetchedFile(data=data, mime=mime, name=attachment.name)

    async def sender_email(self, envelope: Envelope) -> str | None:
        """The sender's email from the contact API (``contact:user.email:readonly``), cached in
        the records store; an error or no permission is remembered for an hour."""
        open_id = envelope.sender.id
        if envelope.sender.email or not self.settings.lookup_sender_email:
            return envelope.sender.email
        if not open_id.startswith("ou_"):
            return None
        ns = f"lark:{self.settings.id}:email"
        cached = await self.context.records.get(ns, open_id)
        if cached is not None:
            return cached or None
        try:
            user = await self.api.user(open_id)
        except (LarkApiError, TimeoutError, OSError) as exc:
            log.info("sender email unavailable", integration_id=self.settings.id, error=str(exc))
            await self.context.records.put(ns, open_id, "", ttl_ms=NO_EMAIL_TTL_MS)
            return None
        email = str(user.get("email") or user.get("enterprise_email") or "")
        await self.context.records.put(
            ns, open_id, email, ttl_ms=EMAIL_TTL_MS if email else NO_EMAIL_TTL_MS
        )
        return email or None

    def __init__(self, *, settings: LarkIntegration, context: AdapterContext) -> None:
        super().__init__(settings=settings, context=context)
        self.api = LarkApi(
            base_url=settings.api_base,
            app_id=settings.app_id,
            app_secret=settings.app_secret.get_secret_value(),
            observe=self.api_calls(),
        )
        self.api.budget = self.platform_budget(settings.app_id)
        self.inbound = LarkInbound(settings=settings, adapter=self)
        self.outbound = LarkOutbound(
            settings=settings, api=self.api, records=context.records, spawn=context.spawn
        )
        self.actions = LarkChatActions(self.api)
        self.bot_open_id: str | None = None
        self.bot_error = ""
        self._bot_task: asyncio.Task[None] | None = None
        self.connection: LongConnection | None = None  # when configured

    @classmethod
    def declared(cls, settings: IntegrationBase) -> frozenset[Capability]:
        """Everything, in both card modes (docs/lark.md)."""
        return frozenset(Capability)

    # --- chat actions (adapters/lark/outbound/actions.py) ---------------------------------------
    def chat_tools(self) -> frozenset[str]:
        return frozenset(TOOLS)

    async def post_message(
        self, chat: Chat, text: str, *, mentions: bool, idempotency_key: str
    ) -> None:
        await self.actions.message(chat, text, mentions=mentions, key=idempotency_key)

    async def post_file(self, chat: Chat, item: Media, *, idempotency_key: str) -> None:
        await self.actions.file(chat, item, key=idempotency_key)

    async def chat_history(self, chat: Chat, limit: int) -> list[ChatMessage] | None:
        return await self.actions.history(chat, limit)

    async def chat_members(self, chat: Chat) -> list[ChatMember] | None:
        return await self.actions.members(chat)

    async def start(self) -> None:
        """Learn the bot's own open_id (pitfalls #11), then open the long connection if any."""
        if not await self._fetch_bot():
            self._bot_task = asyncio.create_task(
                self._retry_bot(), name=f"lark-bot:{self.settings.id}"
            )
        if self.settings.connection_mode == "long_connection":
            self.connection = LongConnection(
                settings=self.settings,
                inbound=self.inbound,
                loop=asyncio.get_running_loop(),
                context=self.context,
            )
            self.connection.start()

    async def _fetch_bot(self) -> bool:
        try:
            bot = await self.api.bot_info()
        except Exception as exc:
            self.bot_error = f"{type(exc).__name__}: {exc}"
            log.warning(
                "lark bot info unavailable", integration_id=self.settings.id, error=str(exc)
            )
            return False
        self.bot_open_id = str(bot.get("open_id") or "") or None
        self.bot_error = "" if self.bot_open_id else "bot info has no open_id"
        log.info(
            "lark bot identified", integration_id=self.settings.id, known=bool(self.bot_open_id)
        )
        return self.bot_open_id is not None

    async def _retry_bot(self) -> None:
        delay = 1.0
        while not await self._fetch_bot():
            await asyncio.sleep(delay)
            delay = min(delay * 2, 60.0)

    async def stop(self) -> None:
        if self._bot_task is not None:
            self._bot_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._bot_task
        if self.connection is not None:
            await self.connection.stop()
        await self.api.close()

    def readiness(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "ready": self.bot_open_id is not None,
            "mode": self.settings.connection_mode,
            "botIdentified": self.bot_open_id is not None,
        }
        if self.bot_error:
            state["error"] = self.bot_error
        if self.connection is not None:
            # A standby is ready: another process holds the app's connection (its lease).
            state.update(self.connection.readiness())
            state["ready"] = state["ready"] and state["connection"] in ("connected", "standby")
        return state

    def answer_part_bytes(self) -> int | None:
        """A text message's share of a long answer: past ``maxAnswerParts`` of them the answer
        is the file answer.md (``im/v1/files``, sent as a ``file`` message)."""
        return TEXT_PART_BYTES

    def reuses_card(self, handle: str) -> bool:
        # A card message is PATCHed in place by any turn. A CardKit card ("ck:") closed its
        # streaming mode and its write sequence lapses after a day; a card that fell back to
        # text ("tx:") answers once: each of those turns gets a card of its own.
        return not handle.startswith(("tx:", "ck:"))


factory = Factory(
    platform="lark", adapter=LarkAdapter, settings_model=LarkIntegration, routes=setup_routes
)


__all__ = ["LarkAdapter", "LarkIntegration", "factory"]
