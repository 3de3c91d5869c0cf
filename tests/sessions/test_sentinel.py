"""The gateway on a Redis watched by Sentinel (``redis.mode: sentinel``): it finds the master
through the sentinels, and after a failover its messages go to the new master at once, not to
the old one (which Sentinel demotes only about 10 s later; writes made there meanwhile would be
lost in its resync).

Sentinel's behaviour (https://redis.io/docs/latest/operate/oss_and_stack/management/sentinel/,
"SENTINEL FAILOVER"; src/sentinel.c): the chosen replica gets REPLICAOF NO ONE, every sentinel
then names it (GET-MASTER-ADDR-BY-NAME), and the old master is reconfigured as its replica
when the sentinels next look at it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from sessions import KeyBuilder
from tests.support.cluster import LocalSentinel
from tests.support.configs import base_config
from tests.support.helpers import InProcessGateway
from tests.support.waits import eventually

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sentinel_set(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSentinel]:
    sentinel = LocalSentinel(Path(tmp_path_factory.mktemp("sentinel"))).start()
    try:
        yield sentinel
    finally:
        sentinel.stop()


def sentinel_config(sentinel: LocalSentinel, prefix: str) -> dict[str, Any]:
    config = base_config(prefix)
    config["redis"] = {
        "mode": "sentinel",
        "sentinels": sentinel.sentinels,
        "masterName": sentinel.master_name,
        "keyPrefix": prefix,
    }
    return config


async def test_messages_flow_through_a_sentinel_failover(
    sentinel_set: LocalSentinel, prefix: str
) -> None:
    gateway = InProcessGateway(sentinel_config(sentinel_set, prefix))
    await gateway.start()
    console = gateway.client
    try:
        assert gateway.gateway.redis is not None and gateway.gateway.redis.mode == "sentinel"
        await console.send("before the failover", event_id="evt-before")
        await console.wait_cards()
        old = sentinel_set.master_port()
        # What was written so far reaches the replica first: replication is asynchronous, and
        # a failover may lose a last write that had not (the first card, on a busy machine).
        master = aioredis.Redis(port=old)
        try:
            assert await master.execute_command("WAIT", 1, 5000) >= 1
        finally:
            await master.aclose()
        new = await asyncio.to_thread(sentinel_set.failover)
        assert new != old
        # the gateway hears of it (+switch-master) and moves its connections
        handle = gateway.gateway.redis
        await eventually(lambda: handle.master is not None and handle.master[1] == new)
        await console.send("after the failover", event_id="evt-after")
        cards = await console.wait_cards(count=2, timeout=20)
        assert [c["card"]["answer"] for c in cards] == [
            "You said:\n> before the failover",
            "You said:\n> after the failover",
        ]
        # The new message is on the new master: the gateway did not go on writing to the old
        # one, which is still a master for a while.
        conversation = "console|p2p:dm-alice"
        direct = aioredis.Redis(port=new, decode_responses=True)
        try:
            assert await direct.exists(KeyBuilder(prefix=prefix).dedup(conversation, "evt-after"))
        finally:
            await direct.aclose()
        # a redelivery of the first message is still recognised (its dedup key was replicated)
        await console.send("before the failover", event_id="evt-before")
        await gateway.gateway.idle()
        assert len(await console.cards()) == 2
    finally:
        await gateway.stop()
