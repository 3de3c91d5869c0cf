"""Fixtures of the WeCom tests: the fake WeCom server and the gateways a test starts."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fakes.wecom import FakeWeCom
from tests.support.helpers import Gateways
from tests.support.wecom import CORP_ID


@pytest.fixture
async def fake() -> AsyncIterator[FakeWeCom]:
    server = FakeWeCom(corp_id=CORP_ID)
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
def gateways(fake: FakeWeCom, gateways: Gateways) -> Gateways:
    """The suite's pool of gateways, after the fake WeCom: the gateways stop first, so a turn
    still finishing at the end of a test sends its last card to a server that is there."""
    return gateways
