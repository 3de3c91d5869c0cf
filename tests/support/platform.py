"""The one shape of a platform harness: the platform's fake server, an in-process gateway in
front of it and an HTTP client for what the platform sends; ``close`` ends all but the fake
(the fixture that started the fake stops it, after the gateway). The Lark and DingTalk harnesses
derive from it; the WeCom tests use the same order through their ``gateways`` fixture."""

from __future__ import annotations

from typing import Generic, TypeVar

import aiohttp

from tests.support.helpers import InProcessGateway

Fake = TypeVar("Fake")


class PlatformHarness(Generic[Fake]):
    def __init__(self, fake: Fake, gateway: InProcessGateway) -> None:
        self.fake = fake
        self.gw = gateway
        self.base = f"http://127.0.0.1:{gateway.port}"
        self.http = aiohttp.ClientSession()

    @property
    def gateway(self) -> InProcessGateway:
        return self.gw

    async def idle(self) -> None:
        """Until the gateway has nothing under way (``Gateway.idle``)."""
        await self.gw.idle()

    async def close(self) -> None:
        """The client and the gateway (stopping a gateway twice is harmless)."""
        await self.http.close()
        await self.gw.stop()
