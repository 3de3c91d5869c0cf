"""One long connection per bot across workers and replicas (issue 12): the owner lease of
``gateway.edge.leases`` and the three long-connection transports using it (Lark's long connection,
DingTalk's stream, WeCom's ``aibot_ws``)."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis

from gateway.edge.leases import LeasedConnection, OwnerLease
from gateway.edge.stores import StoreUnavailable
from sessions import KeyBuilder, RecordStore
from tests.support.configs import base_config
from tests.support.helpers import DaemonProcess, InProcessGateway
from tests.support.waits import eventually
from tests.support.workers import ONE_EACH, Platforms, platforms

LEASE_S = 2.0


# --- the lease -------------------------------------------------------------------------------
class FlakyRecords:
    """The real record store, made unreachable at will (as Redis down would)."""

    def __init__(self, records: RecordStore) -> None:
        self.records = records
        self.down = False

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.records, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.down:
                raise StoreUnavailable("connection refused")
            return await method(*args, **kwargs)

        return call


@pytest.fixture
def records(redis_client: aioredis.Redis, prefix: str) -> RecordStore:
    return RecordStore(client=redis_client, keys=KeyBuilder(prefix=prefix))


async def test_one_holder_at_a_time_renewed_released_and_expiring(records: RecordStore) -> None:
    a = OwnerLease(records, namespace="t", key="bot", ttl_ms=600)
    b = OwnerLease(records, namespace="t", key="bot", ttl_ms=600)
    assert await a.take()
    assert not await b.take()
    assert await a.take()  # a renewal
    assert await b.holder() == a.me
    await b.release()  # not b's to release: nothing happens
    assert await a.holder() == a.me
    await a.release()
    assert await b.take()
    began = time.monotonic()
    await eventually(a.take, timeout=3)  # b stopped renewing: its lease runs out
    assert 0.3 < time.monotonic() - began < 1.5


class Link:
    """What a lease holds: a connection counted open or closed."""

    def __init__(self) -> None:
        self.open = False
        self.opens = 0

    async def connect(self) -> None:
        self.open, self.opens = True, self.opens + 1

    async def disconnect(self) -> None:
        self.open = False


def held(records: Any, link: Link, ttl_ms: int = 1000) -> LeasedConnection:
    lease = OwnerLease(records, namespace="t", key="bot", ttl_ms=ttl_ms)
    return LeasedConnection(
        lease, connect=link.connect, disconnect=link.disconnect, integration_id="i"
    )


async def test_a_standby_takes_over_at_once_after_a_stop_and_within_the_lease_after_a_death(
    records: RecordStore,
) -> None:
    links = [Link(), Link()]
    a, b = held(records, links[0]), held(records, links[1])
    a.start()
    await eventually(lambda: a.role == "owner")
    b.start()
    await eventually(lambda: b.role == "standby")
    assert b.readiness() == {"lease": "standby", "leaseHolder": a.lease.me}
    assert [x.open for x in links] == [True, False]
    await a.stop()  # graceful: released
    await eventually(lambda: links[1].open, timeout=0.5)
    assert a.role == "stopped" and not links[0].open
    # A holder that dies (its loop gone, nothing released): the lease runs out first.
    c_link = Link()
    c = held(records, c_link)
    c.start()
    await eventually(lambda: c.role == "standby")
    assert b._task is not None
    b._task.cancel()
    died = time.monotonic()
    await eventually(lambda: c_link.open, timeout=3)
    assert 0.5 < time.monotonic() - died < 1.0 * 1.2 + 0.5
    await c.stop()


async def test_an_owner_keeps_its_connection_while_redis_is_unreachable(
    records: RecordStore,
) -> None:
    flaky = FlakyRecords(records)
    link, other_link = Link(), Link()
    owner, standby = held(flaky, link, 600), held(flaky, other_link, 600)
    owner.start()
    await eventually(lambda: owner.role == "owner")
    standby.start()
    await eventually(lambda: standby.role == "standby")
    flaky.down = True
    # The lease runs out in Redis (nobody could renew or take it), then a renewal period more
    # (0.2 s): both have tried again with it gone. The time itself is under test.
    await eventually(lambda: _gone(records), timeout=3)
    await asyncio.sleep(0.25)
    assert link.open and link.opens == 1 and not other_link.open
    assert owner.role == "owner" and standby.role == "standby"
    # Redis is back, the lease expired meanwhile: whoever takes it first holds it, the other
    # stands by (an owner that lost the race closes): one connection again.
    flaky.down = False
    await eventually(lambda: {owner.role, standby.role} == {"owner", "standby"})
    await asyncio.sleep(0.5)  # two renewal periods more: it stays so (time under test)
    assert link.open != other_link.open
    assert {owner.role, standby.role} == {"owner", "standby"}
    await owner.stop()
    await standby.stop()


async def _gone(records: RecordStore) -> bool:
    return await records.get("t", "bot") is None


async def test_an_owner_that_lost_its_lease_closes_its_connection(records: RecordStore) -> None:
    link = Link()
    owner = held(records, link, 600)
    owner.start()
    await eventually(lambda: link.open)
    await records.put("t", "bot", "someone-else", ttl_ms=60_000)  # e.g. it stalled past the lease
    await eventually(lambda: not link.open and owner.role == "standby", timeout=2)
    assert owner.readiness()["leaseHolder"] == "someone-else"
    await owner.stop()
    assert await records.get("t", "bot") == "someone-else"  # not released: not ours


# --- the transports, two replicas ------------------------------------------------------------
def config(prefix: str, fakes: Platforms) -> dict[str, Any]:
    c = base_config(prefix)
    c["runtime"]["connectionLeaseSeconds"] = LEASE_S
    c["integrations"] = fakes.integrations()
    c["logging"] = {"level": "info", "format": "json"}
    return c


async def readyz(port: int) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/readyz") as resp,
    ):
        body: dict[str, Any] = await resp.json()
        return body


def roles(body: dict[str, Any]) -> dict[str, str]:
    return {i: body["checks"][i].get("lease", "") for i in ("lark-main", "dt")}


async def test_two_replicas_hold_one_connection_per_bot_and_readyz_tells_who(
    prefix: str, redis_client: aioredis.Redis
) -> None:
    async with platforms() as fakes:
        a = InProcessGateway(config(prefix, fakes))
        b = InProcessGateway(config(prefix, fakes))
        await a.start()
        try:
            await eventually(lambda: fakes.connections() == ONE_EACH)
            await b.start()
            try:
                # Each bot's first lease attempt runs in its own task: wait for all three (the
                # WeCom connection keeps its own state), not for one and then read the others.
                ready_b = await eventually(
                    lambda: _when(
                        readyz(b.port),
                        lambda r: (
                            roles(r) == {"lark-main": "standby", "dt": "standby"}
                            and r["checks"]["wc"]["state"] == "standby"
                        ),
                    )
                )
                ready_a = await readyz(a.port)
                assert roles(ready_a) == {"lark-main": "owner", "dt": "owner"}
                assert roles(ready_b) == {"lark-main": "standby", "dt": "standby"}
                assert ready_a["checks"]["lark-main"]["connection"] == "connected"
                assert ready_b["checks"]["lark-main"]["connection"] == "standby"
                assert ready_b["checks"]["dt"]["state"] == "standby"
                assert ready_b["checks"]["wc"]["state"] == "standby"
                assert ready_a["ready"] and ready_b["ready"]  # a standby serves all the same
                await asyncio.sleep(LEASE_S)  # renewals go on: still one each
                assert fakes.connections() == ONE_EACH
                assert fakes.opened() == ONE_EACH
                await a.stop()  # a graceful stop releases: b takes over at once
                await eventually(lambda: fakes.opened() == {k: 2 for k in ONE_EACH}, timeout=3)
                await eventually(lambda: fakes.connections() == ONE_EACH)
            finally:
                await b.stop()
        finally:
            await a.stop()


async def _when(body: Any, check: Any) -> Any:
    value = await body
    return value if check(value) else None


@pytest.mark.slow
async def test_killing_the_owner_makes_the_other_replica_connect_within_the_lease(
    prefix: str, redis_client: aioredis.Redis, tmp_path: Path
) -> None:
    async with platforms() as fakes:
        a = DaemonProcess(config(prefix, fakes), tmp_path, "a")
        b = DaemonProcess(config(prefix, fakes), tmp_path, "b")
        try:
            await a.start()
            await eventually(lambda: fakes.connections() == ONE_EACH, timeout=15)
            await b.start()
            await eventually(
                lambda: _when(readyz(b.port), lambda r: r["checks"]["wc"]["state"] == "standby")
            )
            assert fakes.opened() == ONE_EACH
            keys = KeyBuilder(prefix=prefix)
            leases = [
                keys.record("conn-lease", "lark:cli_test"),
                keys.record("conn-lease", "dingtalk:dingappkey"),
                keys.record("wecom-ws", "aib-1:owner"),
            ]
            assert a.proc is not None and b.proc is not None
            holders = await redis_client.mget(leases)
            assert all(f":{a.proc.pid}:" in h for h in holders), holders  # host:pid:random
            a.kill(signal.SIGKILL)
            killed = time.monotonic()

            async def taken_over() -> bool:
                holders = await redis_client.mget(leases)
                return all(h and f":{b.proc.pid}:" in h for h in holders)  # type: ignore[union-attr]

            await eventually(taken_over, timeout=10)
            took = time.monotonic() - killed
            # The lease runs out at most LEASE_S after the last renewal, and a standby tries
            # every fifth of it.
            assert took < LEASE_S * 1.2 + 0.5, took
            await eventually(lambda: fakes.opened() == {k: 2 for k in ONE_EACH}, timeout=10)
            await eventually(lambda: fakes.connections() == ONE_EACH)
            body = await readyz(b.port)
            assert roles(body) == {"lark-main": "owner", "dt": "owner"}
            assert body["checks"]["wc"]["state"] == "connected"
        finally:
            await a.stop()
            await b.stop()
