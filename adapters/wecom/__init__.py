"""WeCom (企业微信): a self-built app (encrypted XML callbacks, template cards) or an AI bot
(encrypted JSON callbacks with stream replies, or the long connection). platforms.md §3."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from adapters.wecom.aibot import StreamOutbound
from adapters.wecom.api import WeComApi
from adapters.wecom.connection import AibotConnection
from adapters.wecom.crypto import WeComCrypto
from adapters.wecom.inbound import setup_routes
from adapters.wecom.outbound import AppOutbound
from adapters.wecom.settings import WeComIntegration
from gateway.adapter import Adapter, AdapterContext, LiveAdapters
from gateway.envelope import Envelope
from gateway.progress import Progress
from gateway.settings import IntegrationBase


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
