"""WeCom (企业微信): a self-built app (encrypted XML callbacks, template cards) or an AI bot
(encrypted JSON callbacks with stream replies, or the long connection). docs/wecom.md."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import structlog

from adapters.wecom.api import WeComApi, WeComApiError
from adapters.wecom.cards import APP_MARKDOWN_BYTES, STREAM_BYTES
from adapters.wecom.connection import STATES, AibotConnection
from adapters.wecom.crypto import WeComCrypto
from adapters.wecom.inbound import (
    AibotCallbacks,
    AppCallbacks,
    CallbackAdapter,
    Opener,
    setup_routes,
)
from adapters.wecom.outbound import AppOutbound, Outbound
from adapters.wecom.outbound.stream import StreamOutbound
from adapters.wecom.settings import WeComIntegration
from gateway.config.bases import IntegrationBase
from gateway.edge.capabilities import Capability
from gateway.edge.chat_actions import HISTORY, SEND_FILE, SEND_MESSAGE, Unsupported
from gateway.edge.context import AdapterContext
from gateway.edge.downloads import FetchedFile
from gateway.edge.factory import Factory
from gateway.envelope import Attachment, Chat, Envelope
from gateway.progress import Media

log = structlog.get_logger("adapters.wecom")

EMAIL_TTL_MS = 86_400_000  # a directory entry rarely changes within a day
NO_EMAIL_TTL_MS = 3_600_000  # none, or refused: asked again after an hour
_MENTION = re.compile(r"<\s*@")  # an AI bot's markdown mention, <@userid>


def _secret(value: Any) -> str:
    return str(value.get_secret_value()) if value is not None else ""


class WeComAdapter(CallbackAdapter):
    """One WeCom integration. Its connection mode picks, once, how it answers (``outbound``:
    app messages, AI-bot stream replies or long-connection frames) and, for the two callback
    modes, how its callbacks are read (``callbacks``)."""

    connection_states = STATES

    settings: WeComIntegration

    def __init__(self, *, settings: WeComIntegration, context: AdapterContext) -> None:
        super().__init__(settings=settings, context=context)
        self.clock: Callable[[], float] = time.time  # tests move it to the sample vectors' time
        self.callbacks = None
        self.outbound: Outbound
        self.api: WeComApi | None = None  # app mode: the server API (sender emails)
        self._refusals: set[int] = set()  # user/get errcodes already logged
        mode = settings.connection_mode
        if mode == "aibot_ws":
            self.outbound = AibotConnection(settings=settings, context=context)
            return
        crypto = WeComCrypto(
            token=_secret(settings.token),
            encoding_aes_key=_secret(settings.encoding_aes_key),
            receive_id=settings.corp_id if mode == "app" else "",
        )
        opener = Opener(
            crypto=crypto,
            window_s=settings.signature_window_seconds,
            clock=lambda: self.clock(),
        )
        if mode == "app":
            assert settings.agent_id is not None
            api = WeComApi(
                api_base=settings.api_base,
                corp_id=settings.corp_id,
                corp_secret=_secret(settings.corp_secret),
                observe=self.api_calls(),
            )
            api.budget = self.platform_budget(settings.corp_id)
            self.api = api
            app = AppOutbound(
                integration_id=settings.id,
                agent_id=settings.agent_id,
                api=api,
                records=context.records,
            )
            self.outbound = app
            self.live_updates = False  # app messages show no live progress (outbound)
            self.callbacks = AppCallbacks(opener=opener, outbound=app, integration_id=settings.id)
        else:
            stream = StreamOutbound(
                integration_id=settings.id,
                records=context.records,
                window_s=settings.stream_window_seconds,
                bot_key=crypto.key,
                api_base=settings.api_base,
                clock=lambda: self.clock(),
            )
            self.outbound = stream
            self.callbacks = AibotCallbacks(
                opener=opener, stream=stream, integration_id=settings.id
            )

    async def start(self) -> None:
        await self.outbound.start()

    async def stop(self) -> None:
        await self.outbound.stop()

    def readiness(self) -> dict[str, Any]:
        return self.outbound.readiness()

    # --- chat actions: an app posts markdown and media to a user; aibot_ws posts markdown -------
    def chat_tools(self) -> frozenset[str]:
        mode = self.settings.connection_mode
        if mode == "app":
            return frozenset({SEND_MESSAGE, SEND_FILE, HISTORY})
        return frozenset({SEND_MESSAGE, HISTORY} if mode == "aibot_ws" else {HISTORY})

    def plain_mentions(self, text: str) -> str:
        """An AI bot's markdown mentions ``<@userid>`` (智能机器人 markdown); its "<" becomes a
        fullwidth "＜", which reads the same and notifies nobody."""
        return _MENTION.sub("\uff1c@", text)

    async def post_message(
        self, chat: Chat, text: str, *, mentions: bool, idempotency_key: str
    ) -> None:
        if not mentions:
            text = self.plain_mentions(text)
        if isinstance(self.outbound, AppOutbound):
            await self.outbound.post_markdown(chat.id, text, key=idempotency_key)
            return
        await super().post_message(chat, text, mentions=True, idempotency_key=idempotency_key)

    async def post_file(self, chat: Chat, item: Media, *, idempotency_key: str) -> None:
        if not isinstance(self.outbound, AppOutbound):
            raise Unsupported("a WeCom AI bot sends no files here")
        await self.outbound.post_media(chat.id, item, key=idempotency_key)

    @classmethod
    def declared(cls, settings: IntegrationBase) -> frozenset[Capability]:
        """An app: everything but groups (it talks with one member at a time). An AI bot:
        groups, files in, and images and steps in its stream, which lists a question's options
        to be typed (a direct chat's card over the long connection is sent once, as the turn
        starts: its one button is Stop). No files out (links stay), no directory to ask for an
        email, and nothing of an answer over the long connection is paced. A long answer is a
        file over the long connection (``answer_part_bytes``), parts over callbacks."""
        assert isinstance(settings, WeComIntegration)
        if settings.connection_mode == "app":
            return frozenset(Capability) - {Capability.GROUPS, Capability.GROUP_BUTTONS}
        aibot = {Capability.GROUPS, Capability.FILES_IN, Capability.IMAGES_OUT, Capability.STEPS}
        if settings.connection_mode == "aibot_ws":
            aibot.add(Capability.LONG_ANSWER_FILE)
        return frozenset(aibot)

    def answer_part_bytes(self) -> int | None:
        """A message's share of a long answer; past ``maxAnswerParts`` of them the answer is
        the file answer.md: an app's ``file`` message, an AI bot's long connection uploads it
        (connection/upload.py). An AI bot in callback mode has no way to send a file (its
        stream and one ``response_url`` markdown message, docs/wecom.md): None, parts."""
        mode = self.settings.connection_mode
        if mode == "app":
            return APP_MARKDOWN_BYTES
        return STREAM_BYTES if mode == "aibot_ws" else None

    def posts_unprompted(self, chat_type: str) -> bool:
        """An app posts to a user (message/send) and aibot_ws to any chat (aibot_send_msg); the
        aibot callback mode only answers what WeCom polls for, so it cannot (docs/wecom.md, "AI
        bot")."""
        mode = self.settings.connection_mode
        return mode == "aibot_ws" or (mode == "app" and chat_type == "p2p")

    async def sender_email(self, envelope: Envelope) -> str | None:
        """App mode: the sender's ``email``, else ``biz_mail``, from ``user/get`` (doc 90196),
        cached in the records store a day (none for an hour). WeCom gives them only to apps
        that see the member and, for apps made since 2022-06-20, not without the member's
        consent: a refusal (e.g. 60011, outside the visible range) is logged once per code
        and the turn runs without an email. The AI bot modes have no server API to ask."""
        if envelope.sender.email or self.api is None or not self.settings.lookup_sender_email:
            return envelope.sender.email
        userid = envelope.sender.id
        if not userid or envelope.sender.is_bot:
            return None
        ns = f"wecom:{self.settings.id}:email"
        cached = await self.context.records.get(ns, userid)
        if cached is not None:
            return cached or None
        try:
            user = await self.api.user(userid)
        except WeComApiError as exc:
            if exc.rate_limited or exc.errcode < 0:  # worth asking again on the next turn
                log.info(
                    "sender email look-up failed", integration_id=self.settings.id, code=exc.errcode
                )
                return None
            if exc.errcode not in self._refusals:
                self._refusals.add(exc.errcode)
                log.warning(
                    "sender email look-up refused; turns run without it",
                    integration_id=self.settings.id,
                    code=exc.errcode,
                )
            await self.context.records.put(ns, userid, "", ttl_ms=NO_EMAIL_TTL_MS)
            return None
        except (TimeoutError, aiohttp.ClientError) as exc:
            log.info(
                "sender email look-up failed",
                integration_id=self.settings.id,
                error=type(exc).__name__,
            )
            return None
        email = str(user.get("email") or user.get("biz_mail") or "")
        ttl = EMAIL_TTL_MS if email else NO_EMAIL_TTL_MS
        await self.context.records.put(ns, userid, email, ttl_ms=ttl)
        return email or None

    async def fetch_attachment(
        self, envelope: Envelope, attachment: Attachment, *, max_bytes: int
    ) -> FetchedFile | None:
        """An app's media by MediaId (``media/get``); an AI bot's by its encrypted download link
        (valid five minutes)."""
        return await self.outbound.fetch(attachment, max_bytes)


factory = Factory(
    platform="wecom", adapter=WeComAdapter, settings_model=WeComIntegration, routes=setup_routes
)


__all__ = ["WeComAdapter", "WeComIntegration", "factory"]
