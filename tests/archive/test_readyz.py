"""``/readyz`` shows the archive - its database reachable or not, each integration's outbox
against ``archive.outboxMaxLength``, the archiver's lease holder - and stays ready while the
database is down (turns go on into the outbox), saying so plainly."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import aiohttp

from tests.support.archive import archive_config
from tests.support.helpers import Gateways
from tests.support.postgres import TcpProxy, server_url, with_database
from tests.support.waits import eventually


async def readyz(port: int) -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/readyz") as resp,
    ):
        return resp.status, await resp.json()


async def test_readyz_shows_the_archive_and_stays_ready_while_its_database_is_down(
    pg_url: str, prefix: str, gateways: Gateways
) -> None:
    server = urlsplit(server_url())
    proxy = TcpProxy(server.hostname or "127.0.0.1", server.port or 5432)
    await proxy.open()
    url = with_database(pg_url, urlsplit(pg_url).path.strip("/"), port=proxy.port)
    gw = await gateways(archive_config(prefix, url, outboxMaxLength=500))
    assert gw.gateway.archive is not None
    me = gw.gateway.archive.archiver.consumer
    try:

        async def owned() -> dict[str, Any] | None:
            status, body = await readyz(gw.port)
            archive = body["archive"]
            return archive if status == 200 and archive["archiver"]["role"] == "owner" else None

        archive = await eventually(owned, timeout=20)
        assert archive["database"] == {"reachable": True}
        assert archive["archiver"]["holder"] == me
        assert archive["outbox"]["console"] == {"length": 0, "max": 500, "full": False}
        assert archive["status"] == "ok"
        assert (
            archive["where"].startswith("PostgreSQL at 127.0.0.1:") and "@" not in archive["where"]
        )

        await proxy.close()  # the database stops answering; turns go on
        await gw.client.send("while the database is down")
        await gw.client.wait_cards()
        status, body = await readyz(gw.port)
        assert status == 200 and body["ready"] is True
        archive = body["archive"]
        assert archive["database"]["reachable"] is False and archive["database"]["error"]
        assert archive["status"].startswith("database unreachable: finished turns wait")
        # The turn and its new session wait in the outbox.
        assert archive["outbox"]["console"]["length"] == 2

        await proxy.open()

        async def drained() -> dict[str, Any] | None:
            _status, body = await readyz(gw.port)
            a = body["archive"]
            return a if a["status"] == "ok" and a["outbox"]["console"]["length"] == 0 else None

        archive = await eventually(drained, timeout=30)
        assert archive["database"] == {"reachable": True}
    finally:
        await proxy.close()
