"""The Mini adapter: signed JSON webhooks in; cards sent and replaced in place, with buttons,
out (or, ``answers: texts``, plain messages once the answer is final), each call paced to
Mini's published limits. It declares what Mini lacks rather than implementing it: no files or
pictures either way (an answer's picture stays a link), no chat actions but the gateway's own
history, no long connection, no buttons on texts."""

from __future__ import annotations

from typing import Any

from gateway.config.bases import IntegrationBase
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
        self.api.budget = self.platform_budget(settings.id)  # Mini names no app: its own
        self.inbound = MiniInbound(settings)
        texts = settings.answers == "texts"
        self.outbound = MiniOutbound(self.api, texts=texts)
        if texts:
            self.live_updates = False  # a text is sent once, final

    @classmethod
    def declared(cls, settings: IntegrationBase) -> frozenset[Capability]:
        """Groups, and every answer's calls paced; a card's buttons (in groups too) and steps. No
        files or pictures either way, no directory to look an email up in, and a text shows the
        answer alone."""
        both = {Capability.GROUPS, Capability.PACED}
        if isinstance(settings, MiniIntegration) and settings.answers == "texts":
            return frozenset(both)
        card = {Capability.BUTTONS, Capability.GROUP_BUTTONS, Capability.STEPS}
        return frozenset({*both, *card})

    def reuses_card(self, handle: str) -> bool:
        return not handle.startswith("tx:")  # a card can show a later turn; a text cannot

    def readiness(self) -> dict[str, Any]:
        return {"ready": True, "mode": self.settings.answers}

    async def stop(self) -> None:
        await self.api.close()


factory = Factory(
    platform="mini", adapter=MiniAdapter, settings_model=MiniIntegration, routes=setup_routes
)

__all__ = ["MiniAdapter", "MiniIntegration", "factory"]
