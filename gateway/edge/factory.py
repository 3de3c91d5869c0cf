"""How the core finds and makes adapters: an :class:`AdapterFactory` per platform, registered
under the ``xpert_gateway.adapters`` entry point group (pyproject.toml) as the module-level
``factory`` of the adapter package - each one a :class:`Factory`, parametrised by the adapter
class, its settings model and its routes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import Generic, Protocol, TypeVar

from aiohttp import web

from gateway.config.bases import IntegrationBase
from gateway.edge.adapter import Adapter, LiveAdapters
from gateway.edge.capabilities import Capability
from gateway.edge.context import AdapterContext

ENTRY_POINT_GROUP = "xpert_gateway.adapters"

__all__ = ["ENTRY_POINT_GROUP", "AdapterFactory", "Factory", "discover_adapters"]

A = TypeVar("A", bound=Adapter)


class AdapterFactory(Protocol):
    """What the core asks of a platform's factory."""

    platform: str
    settings_model: type[IntegrationBase]

    def create(self, *, settings: IntegrationBase, context: AdapterContext) -> Adapter: ...

    def declared(self, settings: IntegrationBase) -> frozenset[Capability]:
        """What the platform can do in the mode ``settings`` choose (``Adapter.declared``)."""
        ...

    def setup_routes(self, app: web.Application, adapters: Mapping[str, Adapter]) -> None:
        """Add the platform's HTTP routes; ``adapters`` is the live map of integrationId to
        adapter (wrap it in ``LiveAdapters``; a copy would miss reloads)."""
        ...


class Factory(Generic[A]):
    """The one :class:`AdapterFactory`: makes one platform's adapters (``adapter``, from
    settings of ``settings_model``) and adds its HTTP routes (``routes``, handed the live map
    of that platform's adapters)."""

    def __init__(
        self,
        *,
        platform: str,
        adapter: type[A],
        settings_model: type[IntegrationBase],
        routes: Callable[[web.Application, LiveAdapters[A]], None],
    ) -> None:
        self.platform = platform
        self.adapter = adapter
        self.settings_model = settings_model
        self.routes = routes

    def create(self, *, settings: IntegrationBase, context: AdapterContext) -> Adapter:
        if not isinstance(settings, self.settings_model):
            raise TypeError(f"{self.platform}: settings of {type(settings).__name__}")
        return self.adapter(settings=settings, context=context)

    def declared(self, settings: IntegrationBase) -> frozenset[Capability]:
        return self.adapter.declared(settings)

    def setup_routes(self, app: web.Application, adapters: Mapping[str, Adapter]) -> None:
        """Add the platform's HTTP routes; ``adapters`` is the live map of integrationId to
        adapter (wrapped in ``LiveAdapters``: a copy would miss reloads)."""
        self.routes(app, LiveAdapters(adapters, self.adapter))


def discover_adapters() -> dict[str, AdapterFactory]:
    """Installed adapter factories by platform name."""
    found: dict[str, AdapterFactory] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        factory = ep.load()
        if not isinstance(factory, Factory):
            raise TypeError(f"entry point {ep.name}: {ep.value} is not an adapter Factory")
        found[factory.platform] = factory
    return found
