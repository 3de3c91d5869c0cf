"""WeCom (企业微信): a self-built app (encrypted XML callbacks, template cards) or an AI bot
(encrypted JSON callbacks with stream replies, or the long connection). platforms.md §3."""

from __future__ import annotations

import asyncio
import base64
import binascii
import time
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import structlog
from aiohttp import web

from adapters.wecom.aibot import StreamOutbound
from adapters.wecom.api import WeComApi
from adapters.wecom.connection import AibotConnection
from adapters.wecom.crypto import CryptoError, WeComCrypto, decrypt_media
from adapters.wecom.inbound import setup_routes
from adapters.wecom.messages import media_link
from adapters.wecom.outbound import AppOutbound
from adapters.wecom.settings import WeComIntegration
from gateway.adapter import Adapter, AdapterContext, FetchedFile, LiveAdapters, read_body
from gateway.envelope import Attachment, Envelope
from gateway.progress import Progress
from gateway.settings import IntegrationBase

log = structlog.get_logger("adapters.wecom")

# Magic numbers of what a vision model takes; AI-bot downloads come without a useful type.
MAGIC = [
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
]


def sniff_mime(data: bytes) -> str:
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    found = (mime for magic, mime in MAGIC if data.startswith(magic))
    return next(found, "application/octet-stream")


def _secret(value: Any) -> str:
    return str(value.get_secret_value()) if value is not None else ""


class WeComAdapter(Adapter):
    settings: WeComIntegration

    def __init__(self, *, settings: WeComIntegration, context: AdapterContext) -> None:
        super().__init__(settings=settings, context=context)
        self.clock: Callable[[], float] = time.time  # tests move it to the sample vectors' time
        mode = settings.connection_mode
        self.crypto: WeComCrypto | None = None
        if mode in ("app", "aibot"):
            self.crypto = WeComCrypto(
                token=_secret(settings.token),
                encoding_aes_key=_secret(settings.encoding_aes_key),
                receive_id=settings.corp_id if mode == "app" else "",
            )
        self.api: WeComApi | None = None
        self.app: AppOutbound | None = None
        self.stream: StreamOutbound | None = None
        self.connection: AibotConnection | None = None
        if mode == "app":
            assert settings.agent_id is not None
            self.api = WeComApi(
                api_base=settings.api_base,
                corp_id=settings.corp_id,
                corp_secret=_secret(settings.corp_secret),
            )
            self.app = AppOutbound(
                integration_id=settings.id,
                agent_id=settings.agent_id,
                api=self.api,
                records=context.records,
            )
        elif mode == "aibot":
            self.stream = StreamOutbound(
                integration_id=settings.id,
                records=context.records,
                window_s=settings.stream_window_seconds,
                clock=lambda: self.clock(),
            )
        else:
            self.connection = AibotConnection(settings=settings, context=context)
        self._downloads: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        if self.connection is not None:
            await self.connection.start()

    async def stop(self) -> None:
        if self.connection is not None:
            await self.connection.stop()
        if self.api is not None:
            await self.api.close()
        if self.stream is not None:
            await self.stream.close()
        if self._downloads is not None:
            await self._downloads.close()

    async def fetch_attachment(
        self, envelope: Envelope, attachment: Attachment, *, max_bytes: int
    ) -> FetchedFile | None:
        """An app's media by MediaId (``media/get``); an AI bot's by its encrypted download link
        (valid five minutes), decrypted with the link's own aeskey (long connection) or the
        bot's EncodingAESKey (callbacks)."""
        if self.api is not None:
            got = await self.api.media(attachment.key, max_bytes=max_bytes)
            if got is None:
                return None
            return FetchedFile(data=got[0], mime=got[1], name=attachment.name)
        url, aeskey = media_link(attachment.key)
        if aeskey is not None:
            try:
                key = base64.b64decode(aeskey + "=" * (-len(aeskey) % 4), validate=True)
            except binascii.Error:
                log.warning("attachment key is not base64", integration_id=self.settings.id)
                return None
        elif self.crypto is not None:
            key = self.crypto.key
        else:
            return None  # a long-connection link without its aeskey cannot be decrypted
        if not url.startswith(("https://", "http://")):
            return None
        if self._downloads is None:
            self._downloads = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        limit = max_bytes + 32  # the ciphertext is at most one padding block longer
        async with self._downloads.get(url) as resp:
            data = await read_body(resp, limit) if resp.status == 200 else None
        if data is None:
            return None
        try:
            plain = decrypt_media(data, key)
        except CryptoError as exc:
            log.warning(
                "attachment did not decrypt", integration_id=self.settings.id, error=str(exc)
            )
            return None
        if len(plain) > max_bytes:
            return None
        return FetchedFile(data=plain, mime=sniff_mime(plain), name=attachment.name)

    def readiness(self) -> dict[str, Any]:
        if self.connection is not None:
            return self.connection.readiness()
        return {"ready": True, "mode": self.settings.connection_mode}

    # The renderer cancels its loop task when the turn ends, possibly mid-update; a cancel that
    # lands inside a redis-py command can be swallowed, leaving the turn hanging until shutdown
    # (seen in tests). Card calls therefore run shielded: the cancel lands on the shield, and the
    # update it interrupted still completes (each is idempotent).
    async def send_card(
        self, reply_to: Envelope, progress: Progress, *, idempotency_key: str
    ) -> str:
        return await asyncio.shield(self._send_card(reply_to, progress, idempotency_key))

    async def update_card(self, reply_to: Envelope, handle: str, progress: Progress) -> None:
        await asyncio.shield(self._update_card(reply_to, handle, progress))

    async def _send_card(self, reply_to: Envelope, progress: Progress, idempotency_key: str) -> str:
        if self.app is not None:
            return await self.app.send_card(reply_to, progress, idempotency_key=idempotency_key)
        if self.stream is not None:
            return await self.stream.show(reply_to, progress)
        assert self.connection is not None
        return await self.connection.send_card(reply_to, progress, idempotency_key=idempotency_key)

    async def _update_card(self, reply_to: Envelope, handle: str, progress: Progress) -> None:
        if self.app is not None:
            await self.app.update_card(reply_to, handle, progress)
        elif self.stream is not None:
            await self.stream.show(reply_to, progress)
        else:
            assert self.connection is not None
            await self.connection.update_card(reply_to, handle, progress)

    async def send_text(self, reply_to: Envelope, text: str, *, idempotency_key: str) -> None:
        if self.app is not None:
            await self.app.send_text(reply_to, text, idempotency_key=idempotency_key)
        elif self.stream is not None:
            await self.stream.send_text(reply_to, text)
        else:
            assert self.connection is not None
            await self.connection.send_text(reply_to, text, idempotency_key=idempotency_key)


class WeComAdapterFactory:
    platform = "wecom"
    settings_model: type[IntegrationBase] = WeComIntegration

    def create(self, *, settings: IntegrationBase, context: AdapterContext) -> Adapter:
        assert isinstance(settings, WeComIntegration)
        return WeComAdapter(settings=settings, context=context)

    def setup_routes(self, app: web.Application, adapters: Mapping[str, Adapter]) -> None:
        setup_routes(app, LiveAdapters(adapters, WeComAdapter))


__all__ = ["WeComAdapter", "WeComAdapterFactory", "WeComIntegration"]
