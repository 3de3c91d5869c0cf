"""The web console: a local IM emulator that is an adapter like the others (DESIGN.md §5)."""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import web

from adapters.console.inbound import ConsoleAdapter, setup_routes
from adapters.console.settings import ConsoleIntegration
from gateway.adapter import Adapter, AdapterContext, LiveAdapters
from gateway.settings import IntegrationBase


class ConsoleAdapterFactory:
    platform = "console"
    settings_model: type[IntegrationBase] = ConsoleIntegration

    def create(self, *, settings: IntegrationBase, context: AdapterContext) -> Adapter:
        assert isinstance(settings, ConsoleIntegration)
        return ConsoleAdapter(settings=settings, context=context)

    def setup_routes(self, app: web.Application, adapters: Mapping[str, Adapter]) -> None:
        setup_routes(app, LiveAdapters(adapters, ConsoleAdapter))


__all__ = ["ConsoleAdapterFactory", "ConsoleIntegration"]
