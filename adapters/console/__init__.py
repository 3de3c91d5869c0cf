"""The web console: a local IM emulator that is an adapter like the others (DESIGN.md §5)."""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import web

from adapters.console.inbound import setup_routes
from adapters.console.outbound import ConsoleOutbound
from adapters.console.settings import ConsoleIntegration
from gateway.config.bases import IntegrationBase
from gateway.edge.adapter import Adapter, AdapterContext, LiveAdapters
from gateway.envelope import Envelope
from gateway.progress import Progress


class ConsoleAdapter(Adapter):
    settings: ConsoleIntegration

    def __init__(self, *, settings: ConsoleIntegration, context: AdapterContext) -> None:
        super().__init__(settings=settings, context=context)
        self.outbound = ConsoleOutbound(integration_id=settings.id, timeline=context.timeline)

    async def send_card(
        self, reply_to: Envelope, progress: Progress, *, idempotency_key: str
    ) -> str:
        return await self.outbound.send_card(reply_to, progress, idempotency_key=idempotency_key)

    async def update_card(self, reply_to: Envelope, handle: str, progress: Progress) -> None:
        await self.outbound.update_card(reply_to, handle, progress)

    async def send_text(self, reply_to: Envelope, text: str, *, idempotency_key: str) -> None:
        await self.outbound.send_text(reply_to, text, idempotency_key=idempotency_key)

    def card_handle(self, idempotency_key: str) -> str | None:
        return self.outbound.card_handle(idempotency_key)

    def reuses_card(self, handle: str) -> bool:
        return True  # a card is a timeline record, upserted whatever turn shows in it

    def user_name(self, user_id: str) -> str | None:
        return next((u.name for u in self.settings.users if u.id == user_id), None)


class ConsoleAdapterFactory:
    platform = "console"
    settings_model: type[IntegrationBase] = ConsoleIntegration

    def create(self, *, settings: IntegrationBase, context: AdapterContext) -> Adapter:
        assert isinstance(settings, ConsoleIntegration)
        return ConsoleAdapter(settings=settings, context=context)

    def setup_routes(self, app: web.Application, adapters: Mapping[str, Adapter]) -> None:
        setup_routes(app, LiveAdapters(adapters, ConsoleAdapter))


__all__ = ["ConsoleAdapter", "ConsoleAdapterFactory", "ConsoleIntegration"]
