"""The web console: a local IM emulator that is an adapter like the others (DESIGN.md §5)."""

from __future__ import annotations

from adapters.console.inbound import ChatAdapter, setup_routes
from adapters.console.outbound import ConsoleOutbound
from adapters.console.settings import ConsoleIntegration
from gateway.edge.context import AdapterContext
from gateway.edge.factory import Factory


class ConsoleAdapter(ChatAdapter):
    outbound: ConsoleOutbound
    verifies_senders = False  # the console's request names its sender (docs/security.md)

    def __init__(self, *, settings: ConsoleIntegration, context: AdapterContext) -> None:
        super().__init__(settings=settings, context=context)
        self.outbound = ConsoleOutbound(integration_id=settings.id, timeline=context.timeline)

    def card_handle(self, idempotency_key: str) -> str | None:
        return self.outbound.card_handle(idempotency_key)

    def reuses_card(self, handle: str) -> bool:
        return True  # a card is a timeline record, upserted whatever turn shows in it


factory = Factory(
    platform="console",
    adapter=ConsoleAdapter,
    settings_model=ConsoleIntegration,
    routes=setup_routes,
)


__all__ = ["ConsoleAdapter", "ConsoleIntegration", "factory"]
