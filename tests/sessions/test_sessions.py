"""Contract tests of sessions/: dedup, bursts and the due index, claims and leases, bindings;
each on the shared Redis and on a Redis Cluster."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from sessions import (
    BufferCap,
    BurstWrite,
    Claim,
    IntakeResult,
    KeyBuilder,
    LayoutMismatch,
    SessionStore,
)
from sessions.layout import upgrade_layout_1
from tests.support.helpers import command_calls
from tests.support.redis_targets import BOTH_REDIS
from tests.support.waits import eventually

pytestmark = BOTH_REDIS

CONV = "lark-main|group:oc_1"  # a conversation id (gateway.conversation builds them)


@pytest.fixture
async def store(redis_client: aioredis.Redis, prefix: str) -> AsyncIterator[SessionStore]:
    store = SessionStore(client=redis_client, keys=KeyBuilder(prefix=prefix))
    await store.prepare()
    yield store
    await store.close()


async def calls_on(client: aioredis.Redis, key: str) -> dict[str, int]:
    """INFO commandstats of the server holding ``key`` (the one node of a cluster)."""
    if isinstance(client, RedisCluster):
        node = client.get_node_from_key(key)
        info = await client.info("commandstats", target_nodes=node)
        return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in info.items()}
    return await command_calls(client)


def env(event_id: str, text: str = "hi", kind: str = "message") -> str:
    return json.dumps({"eventId": event_id, "kind": kind, "text": text})


async def intake(
    store: SessionStore,
    event_id: str,
    now: int,
    *,
    window: int = 1000,
    maxw: int = 5000,
    mode: str = "collect",
    kind: str = "message",
):
    return await store.intake(
        BurstWrite(
            conversation=CONV,
            event_id=event_id,
            envelope_json=env(event_id, kind=kind),
            now_ms=now,
            window_ms=window,
            max_window_ms=maxw,
            mode=mode,
        )
    )  # type: ignore[arg-type]


async def claim(store: SessionStore, now: int, owner: str = "a", lease: int = 10_000):
    return await store.claim(
        conversation=CONV, owner=owner, turn_id=f"turn-{owner}-{now}", now_ms=now, lease_ms=lease
    )


def test_a_conversations_keys_and_its_due_shard_share_one_slot() -> None:
    keys = KeyBuilder(prefix="xgw")
    tagged = [
        keys.burst(CONV),
        keys.burst_meta(CONV),
        keys.turn(CONV),
        keys.lease(CONV),
        keys.binding(CONV),
        keys.dedup(CONV, "ev1"),
        keys.cancel(CONV),
        keys.due_of(CONV),
    ]
    assert {key_slot(k.encode()) for k in tagged} == {keys.slot(CONV)}
    assert all(k.startswith("xgw:{") for k in tagged)
    assert keys.burst(CONV) == f"xgw:{{{keys.due_of(CONV)[5:].split('}')[0]}}}:{CONV}:burst"
    # the shard is fixed by the id: the same in every process, whatever the prefix
    assert KeyBuilder(prefix="other").shard(CONV) == keys.shard(CONV)
    # a brace in a chat id cannot move the key out of its shard's slot
    odd = "i|group:a}b{c"
    assert key_slot(keys.binding(odd).encode()) == keys.slot(odd)


def test_due_shards_spread_evenly_over_the_slot_space() -> None:
    """Shard k's tag hashes into the k-th n-th of the slots, so n shards spread evenly over
    primaries owning equal contiguous ranges (what redis-cli --cluster create assigns)."""
    for n in (1, 3, 16, 64):
        keys = KeyBuilder(shards=n)
        slots = [key_slot(k.encode()) for k in keys.due_keys()]
        assert [s * n // 16384 for s in slots] == list(range(n))
    conversations = [f"console|p2p:dm-{i}" for i in range(4000)]
    per_shard = [0] * 16
    for conv in conversations:
        per_shard[KeyBuilder().shard(conv)] += 1
    assert min(per_shard) > 4000 / 16 * 0.7  # CRC-32 spreads ids evenly enough


async def test_intake_is_one_round_trip_and_deduplicates(
    store: SessionStore, redis_client: aioredis.Redis
) -> None:
    await intake(store, "ev0", 1000)  # opens the pipe's connection (its HELLO is not per event)
    writes = store.pipe.stats.writes
    where = store.keys.burst(CONV)
    before = await calls_on(redis_client, where)
    first = await intake(store, "ev1", 1000)
    after = await calls_on(redis_client, where)
    assert first.status == "queued" and first.due_ms == 2000
    # Read off the server: one EVALSHA, and nothing else on the wire (the script's own calls
    # count too, so they are taken out by name).
    sent = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    sent.pop("info")
    assert sent.pop("evalsha") == 1
    # One HMGET reads the burst's meta (its first time, urgency, count and bytes: issue 25).
    assert set(sent) <= {"set", "exists", "rpush", "hmget", "hset", "pexpire", "zadd"}
    assert store.pipe.stats.writes == writes + 1
    again = await intake(store, "ev1", 1100)
    assert again.status == "dup"
    assert await store.burst_length(CONV) == 2


async def test_trailing_debounce_capped_by_max_window(store: SessionStore) -> None:
    assert (await intake(store, "e1", 0)).due_ms == 1000
    assert (await intake(store, "e2", 800)).due_ms == 1800  # newer message pushes it back
    assert (await intake(store, "e3", 4500)).due_ms == 5000  # capped: first + maxWindow
    assert await claim(store, 4999) is None  # not due yet
    got = await claim(store, 5000)
    assert got is not None and [i["eventId"] for i in got.items] == ["e1", "e2", "e3"]
    assert await store.burst_length(CONV) == 0


async def test_one_claim_at_a_time_and_burst_collects_while_busy(store: SessionStore) -> None:
    await intake(store, "e1", 0, window=0)
    first = await claim(store, 0, owner="a")
    assert first is not None and not first.resumed
    res = await intake(store, "e2", 10, window=0)
    assert res.status == "queued" and res.busy
    assert await claim(store, 20, owner="b") is None  # lease held by a
    status, due = await store.finish(conversation=CONV, owner="a", now_ms=30)
    assert status == "more" and due == 30
    second = await claim(store, 30, owner="b")
    assert second is not None and [i["eventId"] for i in second.items] == ["e2"]
    assert (await store.finish(conversation=CONV, owner="b", now_ms=40))[0] == "idle"
    assert await store.due_and_next(10**13) == ([], None)


async def test_reject_policy_answers_busy_without_storing(store: SessionStore) -> None:
    await intake(store, "e1", 0, window=0)
    assert await claim(store, 0) is not None
    res = await intake(store, "e2", 5, window=0, mode="reject")
    assert res.status == "busy"
    assert await store.burst_length(CONV) == 0
    assert (await intake(store, "e2", 6, window=0, mode="reject")).status == "dup"


async def test_expired_lease_lets_another_owner_resume_the_same_turn(store: SessionStore) -> None:
    await intake(store, "e1", 0, window=0)
    first = await claim(store, 0, owner="a", lease=150)
    assert first is not None
    assert await store.set_turn_fields(conversation=CONV, owner="a", card="card-1")
    await asyncio.sleep(0.2)  # the lease (a real PX) expires: owner a "crashed"
    resumed = await eventually(lambda: claim(store, 10**12, owner="b"))
    assert resumed.resumed and resumed.turn_id == first.turn_id
    assert resumed.turn["card"] == "card-1" and resumed.attempts == 2
    # the crashed owner can no longer write or finish
    assert not await store.set_turn_fields(conversation=CONV, owner="a", card="x")
    assert (await store.finish(conversation=CONV, owner="a", now_ms=1))[0] == "lost"


async def test_renew_extends_the_lease_and_reports_cancel(store: SessionStore) -> None:
    await intake(store, "e1", 0, window=0)
    got = await claim(store, 0, owner="a", lease=300)
    assert got is not None
    assert await store.renew(conversation=CONV, owner="a", now_ms=0, lease_ms=300) == (True, "")
    await store.request_cancel(CONV, got.turn_id, ttl_ms=1000)
    assert await store.renew(conversation=CONV, owner="a", now_ms=0, lease_ms=300) == (
        True,
        got.turn_id,
    )
    assert await store.renew(conversation=CONV, owner="b", now_ms=0, lease_ms=300) == (False, "")


async def test_handback_makes_the_turn_due_at_once_without_counting_an_attempt(
    store: SessionStore,
) -> None:
    await intake(store, "e1", 0, window=0)
    got = await claim(store, 0, owner="a")
    assert got is not None
    assert (await store.finish(conversation=CONV, owner="a", now_ms=50, mode="handback"))[0] == (
        "handedback"
    )
    again = await claim(store, 50, owner="b")
    assert again is not None and again.resumed and again.attempts == 1


async def test_a_click_is_a_turn_of_its_own(store: SessionStore) -> None:
    await intake(store, "m1", 0)
    await intake(store, "a1", 10, mode="urgent", kind="action")
    await intake(store, "m2", 20)
    got = await claim(store, 20)
    assert got is not None and [i["eventId"] for i in got.items] == ["m1"]
    await store.finish(conversation=CONV, owner="a", now_ms=30)
    got = await claim(store, 30, owner="b")
    assert got is not None and [i["eventId"] for i in got.items] == ["a1"]


async def test_bindings_continue_then_expire_after_idle_timeout(store: SessionStore) -> None:
    b1 = await store.open_or_continue(
        conversation=CONV,
        now_ms=0,
        timeout_ms=1000,
        new_session_id="s1",
        xpert_id="x",
        snapshot_hash="h",
    )
    assert b1.state == "new" and b1.session_id == "s1"
    b2 = await store.open_or_continue(
        conversation=CONV,
        now_ms=900,
        timeout_ms=1000,
        new_session_id="s2",
        xpert_id="x",
        snapshot_hash="h",
    )
    assert b2.state == "continue" and b2.session_id == "s1" and b2.fields["turns"] == "2"
    b3 = await store.open_or_continue(
        conversation=CONV,
        now_ms=2000,
        timeout_ms=1000,
        new_session_id="s3",
        xpert_id="x",
        snapshot_hash="h",
    )
    assert b3.state == "new" and b3.session_id == "s3"
    old = await store.end_session(CONV)
    assert old["sessionId"] == "s3"
    assert not await store.set_binding_fields(CONV, "s3", interrupt="x")  # ended stays ended


async def test_every_key_has_a_ttl_except_the_documented_indexes(
    store: SessionStore, redis_client: aioredis.Redis, prefix: str
) -> None:
    await intake(store, "e1", 0, window=0)
    got = await claim(store, 0)
    assert got is not None
    await intake(store, "e2", 1, window=0)
    await store.open_or_continue(
        conversation=CONV,
        now_ms=0,
        timeout_ms=1000,
        new_session_id="s1",
        xpert_id="x",
        snapshot_hash="h",
    )
    await store.put_snapshot("h", "{}")
    await store.request_cancel(CONV, got.turn_id, 1000)
    await store.audit({"event": "test"})
    no_ttl = set()
    async for key in redis_client.scan_iter(match=f"{prefix}:*"):
        if await redis_client.pttl(key) < 0:
            no_ttl.add(key)
    keys = store.keys
    # documented in keys.py: the due index, the audit stream, the layout record
    assert no_ttl == {keys.due_of(CONV), keys.audit(), keys.layout()}


async def test_idle_binding_costs_under_one_kilobyte(
    store: SessionStore, redis_client: aioredis.Redis
) -> None:
    await store.open_or_continue(
        conversation=CONV,
        now_ms=1795990000000,
        timeout_ms=3_600_000,
        new_session_id="c480dc8b21e443f4a1a83e9fe43a9f25",
        xpert_id="echo",
        snapshot_hash="0123456789abcdef01234567",
    )
    usage = await redis_client.memory_usage(store.keys.binding(CONV))
    assert usage is not None and usage < 1024


async def test_records_expire_claim_once_and_count_up(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    from sessions import RecordStore

    records = RecordStore(client=redis_client, keys=KeyBuilder(prefix=prefix))
    await records.put("lark", "token", "t-1", ttl_ms=60_000)
    assert await records.get("lark", "token") == "t-1"
    assert 0 < await redis_client.pttl(f"{prefix}:rec:lark:token") <= 60_000
    assert await records.put_new("wecom", "owner", "replica-a", ttl_ms=60_000)
    assert not await records.put_new("wecom", "owner", "replica-b", ttl_ms=60_000)
    assert [await records.incr("cardkit", "card-1", ttl_ms=60_000) for _ in range(3)] == [1, 2, 3]
    await records.delete("lark", "token")
    assert await records.get("lark", "token") is None


async def test_records_through_the_pipe_are_script_calls_with_the_same_answers(
    redis_client: aioredis.Redis, store: SessionStore, prefix: str
) -> None:
    from sessions import RecordStore

    records = RecordStore(client=redis_client, keys=store.keys, pipe=store.pipe)
    key = f"{prefix}:rec:lark:card:om_1"
    assert await records.get("lark:card", "om_2") is None
    before = await calls_on(redis_client, key)
    card = '{"header":{"title":"Réponse ✓"}}'
    await records.put("lark:card", "om_1", card, ttl_ms=60_000)
    assert await records.get("lark:card", "om_1") == card
    assert 0 < await redis_client.pttl(key) <= 60_000
    await records.delete("lark:card", "om_1")
    assert await records.get("lark:card", "om_1") is None
    after = await calls_on(redis_client, key)
    grew = {k for k, v in after.items() if v > before.get(k, 0)}
    # Each went out as EVALSHA (its script's own SET / GET / DEL counted by Redis too), none
    # as a plain command from the client.
    assert after["evalsha"] - before.get("evalsha", 0) == 4
    assert after["set"] - before.get("set", 0) == 1 and after["del"] - before.get("del", 0) == 1
    assert after["get"] - before.get("get", 0) == 2
    assert grew - {
        "pttl",
        "info",
        "script|load",
        "client|setname",
        "client|setinfo",
        "hello",
        "ping",
    } <= {
        "evalsha",
        "eval",
        "set",
        "get",
        "del",
    }


async def test_record_leases_renew_and_release_only_for_their_holder(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    from sessions import RecordStore

    records = RecordStore(client=redis_client, keys=KeyBuilder(prefix=prefix))
    assert await records.put_new("wecom", "owner", "a", ttl_ms=1000)
    assert await records.renew("wecom", "owner", "a", ttl_ms=60_000)
    assert await redis_client.pttl(f"{prefix}:rec:wecom:owner") > 1000
    assert not await records.renew("wecom", "owner", "b", ttl_ms=60_000)
    assert not await records.release("wecom", "owner", "b")
    assert await records.get("wecom", "owner") == "a"
    assert await records.release("wecom", "owner", "a")
    assert await records.get("wecom", "owner") is None


async def test_due_conversations_are_read_from_every_shard_soonest_first(
    store: SessionStore,
) -> None:
    conversations = [f"console|p2p:dm-{i}" for i in range(40)]
    assert len({store.keys.shard(c) for c in conversations}) > 8  # spread over the shards
    for i, conv in enumerate(conversations):
        await store.intake(
            BurstWrite(
                conversation=conv,
                event_id=f"e{i}",
                envelope_json=env(f"e{i}"),
                now_ms=1000 + i,
                window_ms=0,
                max_window_ms=0,
            )
        )
    due, nxt = await store.due_and_next(1000 + 19, limit=64)
    assert due == conversations[:20]  # due now, soonest first, across shards
    assert nxt == 1000 + 20
    due, nxt = await store.due_and_next(10**13, limit=5)
    assert due == conversations[:5]
    assert nxt is not None  # more are due than were asked for: look again at once


async def test_a_look_at_shards_reads_each_in_one_write_and_says_when_each_is_next_due(
    store: SessionStore,
) -> None:
    later = "console|p2p:dm-later"
    now_due = next(
        c
        for c in (f"console|p2p:dm-n{i}" for i in range(64))
        if store.keys.shard(c) != store.keys.shard(later)
    )
    for i, (conv, at) in enumerate(((later, 5000), (now_due, 1000))):
        await store.intake(
            BurstWrite(conv, f"s{i}", env(f"s{i}"), now_ms=at, window_ms=0, max_window_ms=0)
        )
    writes = store.pipe.stats.writes
    due, soonest = await store.due_in(2000, limit=8)
    # All 16 shards' reads in one write per server: the one server, or each primary of a cluster.
    servers = len(store.redis.get_primaries()) if isinstance(store.redis, RedisCluster) else 1
    assert store.pipe.stats.writes == writes + servers
    assert due == [now_due]
    assert soonest[store.keys.shard(later)] == 5000
    assert soonest[store.keys.shard(now_due)] is None  # nothing after what is due
    assert len(soonest) == store.keys.shards
    due, soonest = await store.due_in(2000, shards=[store.keys.shard(later)])
    assert (due, soonest) == ([], {store.keys.shard(later): 5000})
    assert await store.due_in(2000, shards=[]) == ([], {})


async def test_a_replica_with_another_shard_count_is_refused(
    store: SessionStore, redis_client: aioredis.Redis, prefix: str
) -> None:
    other = SessionStore(client=redis_client, keys=KeyBuilder(prefix=prefix, shards=8))
    try:
        with pytest.raises(LayoutMismatch, match=r"dueShards is 8.*laid out for 16"):
            await other.prepare()
    finally:
        await other.close()
    await store.prepare()  # the same layout again: fine


async def test_keys_of_the_previous_layout_are_moved_once(
    redis_client: aioredis.Redis, prefix: str, redis_target
) -> None:  # type: ignore[no-untyped-def]
    if redis_target.mode == "cluster":
        pytest.skip("layout 1 never ran on a cluster")
    old = f"{prefix}:{{{CONV}}}"
    await redis_client.hset(f"{old}:binding", mapping={"sessionId": "s-old", "turns": "3"})
    await redis_client.rpush(f"{old}:burst", env("q1"))
    await redis_client.set(f"{old}:dedup:q1", 1, px=60_000)
    await redis_client.hset(f"{prefix}:{{tl|console|dm-a}}:msgs", "m1", "{}")
    await redis_client.zadd(f"{prefix}:due", {CONV: 1234})
    store = SessionStore(client=redis_client, keys=KeyBuilder(prefix=prefix))
    try:
        await store.prepare()
        assert (await store.binding(CONV))["sessionId"] == "s-old"
        assert [i["eventId"] for i in await store.burst_items(CONV)] == ["q1"]
        assert await redis_client.exists(store.keys.dedup(CONV, "q1"))
        assert await redis_client.hget(store.keys.timeline_messages("console", "dm-a"), "m1")
        assert await store.due_and_next(2000) == ([CONV], None)
        assert not await redis_client.exists(f"{prefix}:due", f"{old}:binding")
        assert await upgrade_layout_1(redis_client, store.keys) == 0  # nothing left to move
    finally:
        await store.close()


async def test_a_burst_past_its_cap_refuses_told_once_and_counts_what_takes_from_it(
    store: SessionStore,
) -> None:
    """Issue 25: the intake step refuses a message past the burst's cap (messages or bytes),
    keeping its dedup record; the first refusal since the burst was under its cap is 'told';
    a claim or a steer's take lowers the count (kept in burstmeta, never read off the burst)."""
    cap = BufferCap(messages=3, bytes=10_000)

    async def add(event_id: str, text: str = "hi") -> IntakeResult:
        return await store.intake(
            BurstWrite(
                conversation=CONV,
                event_id=event_id,
                envelope_json=env(event_id, text),
                now_ms=0,
                window_ms=0,
                max_window_ms=5000,
                cap=cap,
            )
        )

    assert [(await add(f"e{i}")).status for i in range(3)] == ["queued"] * 3
    fourth, fifth = await add("e3"), await add("e4")
    assert (fourth.status, fourth.told, fifth.status, fifth.told) == ("full", True, "full", False)
    assert (await add("e3")).status == "dup"  # a redelivery of a refused message
    assert await store.burst_length(CONV) == 3
    first = await claim(store, 0)
    assert first is not None and len(first.items) == 3  # a whole burst: both keys go
    assert (await add("e5")).status == "queued"
    assert (await add("e6", "x" * 10_000)).status == "full"  # bytes: past the cap
    assert (await add("e7")).status == "queued"
    assert await store.burst_take(conversation=CONV, owner=first.owner, count=1)  # a steer
    assert [i["eventId"] for i in await store.burst_items(CONV)] == ["e7"]
    assert (await add("e8")).status == "queued" and (await add("e9")).status == "queued"
    again = await add("e10")
    assert (again.status, again.told) == ("full", True)  # told anew: the take made room
    meta = await store.redis.hgetall(store.keys.burst_meta(CONV))
    assert meta["n"] == "3" and int(meta["bytes"]) == sum(len(env(e)) for e in ("e7", "e8", "e9"))


async def test_a_split_claim_takes_one_senders_messages_each_time(store: SessionStore) -> None:
    """Issue 36: with ``split_by_sender`` a claim takes the burst's first sender's messages
    only, up to another sender's (read off the JSON text; an id with an escape in it is
    decoded); the rest are due at once, each sender a turn of their own, in order."""
    from sessions import ClaimRequest

    senders = ["alice", "alice", 'b"ob', 'b"ob', "alice"]
    for n, sender in enumerate(senders):
        body = {"eventId": f"e{n}", "kind": "message", "text": "hi", "sender": {"id": sender}}
        await store.intake(
            BurstWrite(
                conversation=CONV,
                event_id=f"e{n}",
                envelope_json=json.dumps(body),
                now_ms=0,
                window_ms=0,
                max_window_ms=5000,
                mode="collect",
            )
        )
    taken: list[list[str]] = []
    for turn in range(3):
        now = 10 * (turn + 1)
        request = ClaimRequest(f"o{turn}", f"t{turn}", now, 10_000, split_by_sender=True)
        claimed = Claim.of_reply(CONV, f"o{turn}", await store.claim_reply(CONV, request))
        assert claimed is not None
        taken.append([i["sender"]["id"] for i in claimed.items])
        await store.finish(conversation=CONV, owner=f"o{turn}", now_ms=now + 1)
    assert taken == [["alice", "alice"], ['b"ob', 'b"ob'], ["alice"]]
