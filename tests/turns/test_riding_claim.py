"""A message due at once has its turn claimed by its own intake call (issue 15): one script call
from the POST to a turn this replica owns, on the shared Redis and on a cluster. When there is
no room, the conversation runs here already, or another replica holds its lease, the message
takes the flusher's way as before and is still answered exactly once."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis

from gateway.turns.claims import Claims, RidingClaims
from sessions import KeyBuilder
from sessions.scripts import lua
from tests.support.configs import base_config
from tests.support.helpers import InProcessGateway
from tests.support.redis_targets import BOTH_REDIS, RedisTarget
from tests.support.waits import eventually

pytestmark = BOTH_REDIS

CONV = "console|p2p:dm-alice"


def _sha(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def _shas() -> tuple[str, str]:
    """The SHA1s of claim.lua and of the intake-with-claim script, as sessions/budgets.py
    builds it."""
    budget = lua("budget_intake.lua").replace("--INTAKE--", lua("intake.lua"), 1)
    both = lua("intake_claim.lua").replace("--BUDGET--", budget, 1)
    both = both.replace("--CLAIM--", lua("claim.lua"), 1)
    return _sha(lua("claim.lua")), _sha(both)


async def _monitored(
    redis_target: RedisTarget, action: Callable[[], Awaitable[None]]
) -> list[list[str]]:
    """The EVALSHA commands Redis ran while ``action`` ran (standalone: MONITOR). Redis feeds a
    monitor in the order it runs commands: once a marker sent after ``action`` is seen, so is
    every command before it."""
    client = redis_target.client()
    marker = f"monitored-{uuid.uuid4().hex}"
    seen: list[list[str]] = []
    try:
        async with client.monitor() as monitor:

            async def listen() -> None:
                while True:
                    info = await monitor.next_command()
                    parts = str(info.get("command", "")).split()
                    if marker in parts or f'"{marker}"' in parts:
                        return
                    if parts and parts[0].upper() == "EVALSHA":
                        seen.append(parts)

            task = asyncio.create_task(listen())
            try:
                await action()
                await client.echo(marker)
                async with asyncio.timeout(10):
                    await task
            finally:
                task.cancel()
    finally:
        await client.aclose()
    return seen


async def test_a_message_due_at_once_is_claimed_by_its_intake(
    gateways: Callable[[dict[str, Any]], Awaitable[InProcessGateway]],
    prefix: str,
    redis_target: RedisTarget,
) -> None:
    gw = await gateways(base_config(prefix))
    flusher, claims = gw.gateway.flusher, gw.gateway.claims
    before = claims.made

    async def one_turn() -> None:
        await gw.client.send("hello")
        await gw.client.wait_cards()
        await gw.idle()  # nothing more will be claimed

    if redis_target.mode == "cluster":  # MONITOR is per node: the turn, and who claimed it
        await one_turn()
    else:
        claim_sha, both_sha = _shas()
        calls = await _monitored(redis_target, one_turn)
        shas = [parts[1].strip('"') for parts in calls]
        assert shas.count(both_sha) == 1
        assert claim_sha not in shas  # no second call to claim the turn
    assert claims.made == before + 1
    assert not claims.riding and not flusher._direct
    [card] = await gw.client.cards()
    assert card["card"]["answer"] == "You said:\n> hello"


async def test_no_claim_rides_without_room_or_while_the_conversation_runs_here(
    gateways: Callable[[dict[str, Any]], Awaitable[InProcessGateway]], prefix: str
) -> None:
    config = base_config(prefix)
    config["runtime"]["maxConcurrentRuns"] = 1
    gw = await gateways(config)
    claims: Claims = gw.gateway.claims
    rides: RidingClaims = gw.gateway.rides

    assert rides.rides(CONV)
    with rides.ride(CONV) as ride:
        assert ride.request is not None
        # One claim on its way fills the only slot; the same conversation gets no second one.
        assert not rides.rides(CONV)
        assert not rides.rides("console|p2p:dm-bob")
        with rides.ride("console|p2p:dm-bob") as other:
            assert other.request is None
        # The intake's answer: the message was not due at once (ride.reply stays None).
    assert ride.tried is False  # not tried: the caller wakes as before
    assert not claims.riding
    assert rides.rides("console|p2p:dm-bob")


async def test_messages_beyond_the_room_still_run_once_each(
    gateways: Callable[[dict[str, Any]], Awaitable[InProcessGateway]], prefix: str
) -> None:
    config = base_config(prefix)
    config["runtime"]["maxConcurrentRuns"] = 1
    config["experts"] = [
        {"id": "echo", "kind": "echo", "stepDelayMs": 60, "charDelayMs": 2, "chunkChars": 4}
    ]
    gw = await gateways(config)
    chats = ["dm-a", "dm-b", "dm-c"]
    await asyncio.gather(*(gw.client.send(f"hi {c}", chat=c, sender=c) for c in chats))
    for chat in chats:
        [card] = await gw.client.wait_cards(chat=chat)
        assert card["card"]["answer"] == f"You said:\n> hi {chat}"
    assert gw.gateway.claims.made == 3


async def test_another_replicas_lease_defers_the_turn_until_it_ends(
    gateways: Callable[[dict[str, Any]], Awaitable[InProcessGateway]],
    prefix: str,
    redis_client: aioredis.Redis,
) -> None:
    gw = await gateways(base_config(prefix))
    keys = KeyBuilder(prefix=prefix)
    # A lease nobody here holds (a replica between turns of this conversation): the claim that
    # rides with the intake is refused, and the turn runs once the lease is gone.
    await redis_client.set(keys.lease(CONV), "elsewhere:1", px=700)
    await gw.client.send("after the lease")

    async def lease_gone() -> bool:
        """No card while the other replica's lease lasts (it is still there after the read)."""
        cards = await gw.client.cards()
        held = await redis_client.get(keys.lease(CONV)) == "elsewhere:1"
        assert not (held and cards), "a turn ran under another replica's lease"
        return not held

    await eventually(lease_gone)
    [card] = await gw.client.wait_cards(timeout=10)
    assert card["card"]["answer"] == "You said:\n> after the lease"
    await eventually(lambda: not gw.gateway.runner.active)
    assert len(await gw.client.cards()) == 1
