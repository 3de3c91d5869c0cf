"""The gateway on a real Redis Cluster (``tests/support/cluster.py``, 3 primaries): the script
auto-pipeline's redirections (MOVED, ASK, TRYAGAIN), sharded and classic pub/sub across nodes
and through a slot migration, and a slot holding live conversations moved while their messages
flow - nothing lost, nothing doubled, order kept.

How a slot moves is redis-cli's ``--cluster reshard`` (src/redis-cli.c, clusterManagerMoveSlot):
SETSLOT IMPORTING on the target, SETSLOT MIGRATING on the source, MIGRATE the keys in batches,
SETSLOT NODE everywhere. Meanwhile the source answers ASK for a command whose keys are all gone,
TRYAGAIN for a multi-key command whose keys are split, and MOVED once the slot is assigned
(cluster.c, getNodeByQuery, Redis 7.0)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.crc import key_slot

from sessions import KeyBuilder, PubSubHub
from sessions.autopipe import ScriptPipe
from tests.support.cluster import LocalCluster
from tests.support.configs import base_config
from tests.support.helpers import InProcessGateway
from tests.support.redis_targets import delete_prefix
from tests.support.waits import eventually

APPEND = """
redis.call('RPUSH', KEYS[1], ARGV[1])
for i = 2, #KEYS do redis.call('SET', KEYS[i], ARGV[1]) end
return {ARGV[1], redis.call('LLEN', KEYS[1])}
"""


@pytest.fixture
async def cluster_client(redis_cluster: LocalCluster, prefix: str) -> AsyncIterator[RedisCluster]:
    client = RedisCluster.from_url(redis_cluster.url, decode_responses=True)
    try:
        yield client
    finally:
        await delete_prefix(client, prefix)
        await client.aclose()


@pytest.fixture
async def pipe(cluster_client: RedisCluster, prefix: str) -> AsyncIterator[ScriptPipe]:
    pipe = ScriptPipe(cluster_client, name=f"{prefix}-scripts")
    yield pipe
    await pipe.close()


def script(client: RedisCluster) -> AsyncScript:
    return client.register_script(f"-- {uuid.uuid4().hex}\n{APPEND}")


def other_node(cluster: LocalCluster, slot: int) -> int:
    owner = cluster.slot_owner(slot)
    return next(p for p in cluster.ports if p != owner)


async def test_calls_for_every_node_go_out_together_and_keep_their_own_replies(
    pipe: ScriptPipe, cluster_client: RedisCluster, redis_cluster: LocalCluster, prefix: str
) -> None:
    s = script(cluster_client)
    keys = [f"{prefix}:{{{i}}}:list" for i in range(30)]
    assert len({redis_cluster.slot_owner(key_slot(k.encode())) for k in keys}) == 3
    replies = await asyncio.gather(
        *(pipe.evalsha(s, [k], [f"m{i}", 0]) for i, k in enumerate(keys))
    )
    assert replies == [[f"m{i}", 1] for i in range(30)]
    # one batch: one write per node, in parallel (NOSCRIPT on each node first: each call sent
    # again as EVAL, to the node that refused it)
    assert pipe.stats.largest_batch == 30 and pipe.stats.script_reloads == 30
    for port in redis_cluster.ports:  # a named connection on each node
        with redis_cluster.node(port) as node:
            assert [c for c in node.client_list() if c.get("name") == pipe.name]


async def test_a_killed_node_connection_is_reopened_and_nothing_is_lost(
    pipe: ScriptPipe, cluster_client: RedisCluster, redis_cluster: LocalCluster, prefix: str
) -> None:
    s = script(cluster_client)
    key = f"{prefix}:{{{prefix}}}:list"
    assert await pipe.evalsha(s, [key], ["first", 0]) == ["first", 1]
    owner = redis_cluster.slot_owner(key_slot(key.encode()))
    with redis_cluster.node(owner) as node:
        [conn] = [c for c in node.client_list() if c.get("name") == pipe.name]
        node.client_kill_filter(_id=conn["id"])
    replies = await asyncio.gather(*(pipe.evalsha(s, [key], [f"m{i}", 0]) for i in range(3)))
    assert [r[0] for r in replies] == ["m0", "m1", "m2"]
    assert await cluster_client.lrange(key, 0, -1) == ["first", "m0", "m1", "m2"]
    assert pipe.stats.reconnects == 1


async def test_a_moved_slot_is_followed_to_its_new_owner(
    pipe: ScriptPipe, cluster_client: RedisCluster, redis_cluster: LocalCluster, prefix: str
) -> None:
    s = script(cluster_client)
    key = f"{prefix}:{{{prefix}}}:list"
    slot = key_slot(key.encode())
    assert await pipe.evalsha(s, [key], ["before", 0]) == ["before", 1]
    target = other_node(redis_cluster, slot)
    await asyncio.to_thread(redis_cluster.migrate_slot, slot, target)
    replies = await asyncio.gather(*(pipe.evalsha(s, [key], [f"m{i}", 0]) for i in range(5)))
    assert replies == [[f"m{i}", i + 2] for i in range(5)]
    assert pipe.stats.moved >= 1
    with redis_cluster.node(target) as node:
        assert node.lrange(key, 0, -1) == ["before", "m0", "m1", "m2", "m3", "m4"]


async def test_ask_sends_the_call_to_the_importing_node_after_asking(
    pipe: ScriptPipe, cluster_client: RedisCluster, redis_cluster: LocalCluster, prefix: str
) -> None:
    s = script(cluster_client)
    key = f"{prefix}:{{{prefix}}}:list"
    slot = key_slot(key.encode())
    assert await pipe.evalsha(s, [key], ["before", 0]) == ["before", 1]
    target = other_node(redis_cluster, slot)
    source = await asyncio.to_thread(redis_cluster.begin_migration, slot, target)
    try:
        assert await asyncio.to_thread(redis_cluster.migrate_keys, slot, source, target) == 1
        # the key is on the target now, the slot still the source's: ASK
        assert await pipe.evalsha(s, [key], ["during", 0]) == ["during", 2]
        fresh = f"{prefix}:{{{prefix}}}:new"  # a key neither has: ASK too, created there
        assert await pipe.evalsha(s, [fresh], ["x", 0]) == ["x", 1]
        assert pipe.stats.asked >= 2
    finally:
        await asyncio.to_thread(redis_cluster.finish_migration, slot, target)
    with redis_cluster.node(target) as node:
        assert node.lrange(key, 0, -1) == ["before", "during"]


async def test_tryagain_waits_until_a_split_slot_has_moved(
    pipe: ScriptPipe, cluster_client: RedisCluster, redis_cluster: LocalCluster, prefix: str
) -> None:
    s = script(cluster_client)
    first, second = f"{prefix}:{{{prefix}}}:a", f"{prefix}:{{{prefix}}}:b"
    assert await pipe.evalsha(s, [first, second], ["before", 0]) == ["before", 1]
    slot = key_slot(first.encode())
    target = other_node(redis_cluster, slot)
    source = await asyncio.to_thread(redis_cluster.begin_migration, slot, target)
    try:
        assert await asyncio.to_thread(redis_cluster.migrate_keys, slot, source, target, 1) == 1
        # one key here, one there: the script cannot run anywhere until the slot has moved
        call = asyncio.ensure_future(pipe.evalsha(s, [first, second], ["during", 0]))
        await eventually(lambda: pipe.stats.tryagain >= 2)
        assert not call.done()
    finally:
        await asyncio.to_thread(redis_cluster.migrate_slot_rest, slot, source, target)
    assert await call == ["during", 2]


async def test_calls_of_one_slot_keep_their_order_while_it_moves(
    pipe: ScriptPipe, cluster_client: RedisCluster, redis_cluster: LocalCluster, prefix: str
) -> None:
    s = script(cluster_client)
    key = f"{prefix}:{{{prefix}}}:list"
    for i in range(40):  # keys for the migration to move, batch by batch
        await cluster_client.set(f"{prefix}:{{{prefix}}}:filler{i}", i)
    slot = key_slot(key.encode())
    target = other_node(redis_cluster, slot)
    moving = asyncio.ensure_future(
        asyncio.to_thread(redis_cluster.migrate_slot, slot, target, batch=2, pause=0.01)
    )
    sent: list[str] = []
    wave = 0
    while not moving.done():  # concurrent calls, wave after wave, until the slot has moved
        texts = [f"w{wave}-{i}" for i in range(5)]
        await asyncio.gather(*(pipe.evalsha(s, [key], [t, 0]) for t in texts))
        sent += texts
        wave += 1
    await moving
    assert await cluster_client.lrange(key, 0, -1) == sent
    assert pipe.stats.asked + pipe.stats.tryagain + pipe.stats.moved > 0


# --- pub/sub ---------------------------------------------------------------------------------
async def _collect(hub: PubSubHub, channels: list[str], into: list[str]) -> None:
    async for data in hub.listen(channels):
        into.append(data)


@pytest.mark.parametrize("sharded", [True, False], ids=["sharded", "classic"])
async def test_pubsub_reaches_listeners_on_every_node_and_follows_a_moved_slot(
    cluster_client: RedisCluster, redis_cluster: LocalCluster, prefix: str, sharded: bool
) -> None:
    keys = KeyBuilder(prefix=prefix)
    channels = keys.control_channels(sharded)
    hub = PubSubHub(cluster_client, sharded=sharded)
    got: list[str] = []
    listener = asyncio.ensure_future(_collect(hub, channels, got))
    try:
        conversations = [f"console|p2p:dm-{i}" for i in range(64)]

        async def delivered(tag: str) -> bool:
            wanted = {f"{tag}-{c}" for c in conversations}
            for conv in conversations:
                await hub.publish(keys.control_channel(conv, sharded), f"{tag}-{conv}")
            await asyncio.sleep(0.05)
            return wanted <= set(got)

        await eventually(lambda: delivered("first"), timeout=10)  # once subscribed
        if sharded:
            assert len({keys.shard(c) for c in conversations}) == 16
        slot = keys.slot(conversations[0])
        await asyncio.to_thread(redis_cluster.migrate_slot, slot, other_node(redis_cluster, slot))
        await eventually(lambda: delivered("after"), timeout=10)  # subscribed on the new owner
    finally:
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listener


# --- the gateway ------------------------------------------------------------------------------
@pytest.mark.parametrize("redis_target", ["cluster"], indirect=True)
async def test_a_slot_with_live_conversations_moves_while_messages_flow(
    redis_target: Any, redis_cluster: LocalCluster, redis_client: Any, prefix: str
) -> None:
    keys = KeyBuilder(prefix=prefix)

    def conversation(chat: str) -> str:
        return f"console|p2p:{chat}"  # gateway.conversation's id of a console direct chat

    shard = keys.shard(conversation("dm-u0"))
    chats = [f"dm-u{i}" for i in range(200) if keys.shard(conversation(f"dm-u{i}")) == shard][:4]
    slot = keys.slot(conversation(chats[0]))
    config = base_config(prefix)
    gateway = InProcessGateway(config)
    await gateway.start()
    console = gateway.client
    sent: dict[str, list[str]] = defaultdict(list)
    stats = gateway.gateway.store.pipe.stats
    flowing = asyncio.Event()
    flowing.set()

    async def talk(chat: str, rounds: int | None = None) -> None:
        """Messages to ``chat``, each acked before the next, until told to stop."""
        while flowing.is_set() if rounds is None else rounds > 0:
            text = f"{chat} message {len(sent[chat])}"
            await console.send(text, chat=chat, sender=chat[3:])
            sent[chat].append(text)
            rounds = None if rounds is None else rounds - 1
            await asyncio.sleep(0.005)

    try:
        # the conversations exist (bindings, dedup keys, turns) before the move
        await asyncio.gather(*(talk(chat, rounds=4) for chat in chats))
        target = other_node(redis_cluster, slot)
        source = await asyncio.to_thread(redis_cluster.begin_migration, slot, target)
        senders = asyncio.gather(*(talk(chat) for chat in chats))  # all chats at once
        await asyncio.to_thread(redis_cluster.migrate_keys, slot, source, target, 3)
        await eventually(lambda: stats.tryagain + stats.asked > 0)  # the move is met
        while await asyncio.to_thread(redis_cluster.migrate_keys, slot, source, target, 3):  # noqa: ASYNC110
            await asyncio.sleep(0.02)  # batch by batch, messages still coming
        await asyncio.to_thread(redis_cluster.finish_migration, slot, target)
        await asyncio.sleep(0.3)  # and after it: traffic over time is the input under test
        flowing.clear()
        await senders
        assert redis_cluster.slot_owner(slot) == target

        async def answered(chat: str) -> list[str] | None:
            cards = await console.cards(chat)
            if any(c["card"]["status"] != "done" for c in cards):
                return None
            lines = [
                ln[2:]
                for c in cards
                for ln in c["card"]["answer"].splitlines()
                if ln.startswith("> ")
            ]
            return lines if len(lines) >= len(sent[chat]) else None

        for chat in chats:
            lines = await eventually(lambda chat=chat: answered(chat), timeout=30, interval=0.2)
            assert lines == sent[chat]  # nothing lost, nothing doubled, arrival order kept
    finally:
        flowing.clear()
        await gateway.stop()
