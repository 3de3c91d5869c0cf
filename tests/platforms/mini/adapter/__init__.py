"""The Mini adapter: signed JSON webhooks in; cards sent and replaced in place, with buttons,
out. It declares what Mini lacks rather than implementing it: no files either way, no history or
members, no long connection."""

from __future__ import annotations

from typing import Any

from gateway.edge.capabilities import Capability
from gateway.edge.context import AdapterContext
from gateway.edge.factory import Factory
from tests.platforms.mini.adapter.api import MiniApi
from tests.platforms.mini.adapter.inbound import MiniBot, MiniInbound, setup_routes
from tests.platforms.mini.adapter.outbound import MiniOutbound
from tests.platforms.mini.adapter.settings import MiniIntegration


class MiniAdapter(MiniBot):
    outbound: MiniOutbound

    def __init__(self, *, settings: MiniIntegration, context: AdapterContext) -> None:
        super().__init__(settings=settings, context=context)
        self.api = MiniApi(
            base_url=settings.api_base,
            token=settings.bot_token.get_secret_value(),
            observe=self.api_calls(),
        )
        self.api.budget = self.platform_budget(settings.id)
        self.inbound = MiniInbound(settings)
        self.outbound = MiniOutbound(self.api)

    def capabilities(self) -> frozenset[Capability]:
        """Buttons; no files either way, no directory to look an email up in."""
        return frozenset({Capability.BUTTONS})

    def reuses_card(self, handle: str) -> bool:
        return True  # any message's card can be replaced by a later turn

    def readiness(self) -> dict[str, Any]:
        return {"ready": True, "mode": "webhook"}

    async def stop(self) -> None:
        await self.api.close()


factory = Factory(
    platform="mini", adapter=MiniAdapter, settings_model=MiniIntegration, routes=setup_routes
)

__all__ = ["MiniAdapter", "MiniIntegration", "factory"]
