"""The audit trail's storage (sessions/audit.py) on the shared Redis and on a Redis Cluster:
newest first per index, since, the session summary, the cap and the retention trimmed on write,
a TTL on every key, every key of an integration in one slot."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.crc import key_slot

from sessions import KeyBuilder, SessionRecords
from sessions.audit import AuditEntry, AuditLimits, AuditStore
from sessions.autopipe import ScriptPipe
from tests.support.redis_targets import BOTH_REDIS

pytestmark = BOTH_REDIS

INTEG = "lark{main}"  # a brace must not end the integration's hash tag early
NOW = int(time.time() * 1000)


def entry(n: int, *, chat: str = "oc_1", session: str = "s1", outcome: str = "done") -> AuditEntry:
    body = {"id": f"t{n}", "chatId": chat, "sessionId": session, "outcome": outcome, "n": n}
    return AuditEntry(
        record_id=f"t{n}",
        integration_id=INTEG,
        chat_id=chat,
        session_id=session,
        outcome=outcome,
        end_ms=NOW - 100_000 + n * 1000,
        body=json.dumps(body),
    )


def store(client: aioredis.Redis, prefix: str, **limits: int) -> AuditStore:
    return AuditStore(
        client=client, keys=KeyBuilder(prefix=prefix), limits=lambda: AuditLimits(**limits)
    )


async def put(audit: AuditStore, *entries: AuditEntry) -> int:
    kept = 0
    for e in entries:
        kept = await audit.put(e, now_ms=NOW, session={"chatId": e.chat_id, "xpertId": "echo"})
    return kept


def ns(records: list[dict[str, Any]]) -> list[int]:
    return [r["n"] for r in records]


async def test_records_come_back_newest_first_by_each_index(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    audit = store(redis_client, prefix)
    await put(
        audit,
        entry(1),
        entry(2, chat="oc_2", session="s2", outcome="error"),
        entry(3),
        entry(4, outcome="cancelled"),
        entry(5, chat="oc_2", session="s2"),
    )
    assert ns(await audit.records(INTEG, since_ms=0, limit=10)) == [5, 4, 3, 2, 1]
    assert ns(await audit.records(INTEG, since_ms=0, limit=2)) == [5, 4]
    assert ns(await audit.records(INTEG, index="chat", value="oc_1", since_ms=0, limit=10)) == [
        4,
        3,
        1,
    ]
    in_order = await audit.records(
        INTEG, index="session", value="s2", since_ms=0, limit=10, order="asc"
    )
    assert ns(in_order) == [2, 5]
    assert ns(await audit.records(INTEG, index="outcome", value="error", since_ms=0, limit=9)) == [
        2
    ]
    since = entry(3).end_ms
    assert ns(await audit.records(INTEG, since_ms=since, limit=10)) == [5, 4, 3]
    # A filter the index does not cover reads on until it has enough (or the index ends).
    done = await audit.records(INTEG, since_ms=0, limit=2, keep=lambda r: r["outcome"] == "done")
    assert ns(done) == [5, 3]
    assert await audit.records("other", since_ms=0, limit=10) == []


async def test_a_filter_pages_through_an_index_longer_than_a_page(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    audit = store(redis_client, prefix)
    await put(audit, entry(0, outcome="error"), *(entry(n) for n in range(1, 451)))
    found = await audit.records(INTEG, since_ms=0, limit=5, keep=lambda r: r["outcome"] == "error")
    assert ns(found) == [0]
    few = await audit.records(
        INTEG, since_ms=0, limit=5, keep=lambda r: r["outcome"] == "error", max_scan=100
    )
    assert few == []  # the bound on what one query reads holds


async def test_the_session_summary_counts_turns_and_outcomes(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    audit = store(redis_client, prefix)
    await audit.session_opened(
        INTEG, "s1", {"chatId": "oc_1", "xpertId": "echo"}, at_ms=NOW - 99_500
    )
    await audit.session_opened(INTEG, "s9", {"chatId": "oc_9"}, at_ms=NOW - 99_400)
    [(_sid, info)] = [s for s in await audit.sessions(INTEG, since_ms=0, limit=10) if s[0] == "s1"]
    assert (info["turns"], info["startedAt"], info["chatId"]) == (0, NOW - 99_500, "oc_1")
    await put(audit, entry(1), entry(2, outcome="error"), entry(3, chat="oc_3", session="s3"))
    listed = await audit.sessions(INTEG, since_ms=0, limit=10)
    assert [sid for sid, _ in listed] == ["s3", "s1", "s9"]  # most recently active first
    info = dict(listed)["s1"]
    assert info["turns"] == 2 and info["outcomes"] == {"done": 1, "error": 1}
    assert (info["lastOutcome"], info["lastTurnId"]) == ("error", "t2")
    assert info["lastActiveAt"] == entry(2).end_ms and info["startedAt"] == NOW - 99_500
    # A session the trail did not know (opened before it existed) gets the summary it was given.
    assert dict(listed)["s3"]["chatId"] == "oc_3" and dict(listed)["s3"]["turns"] == 1
    infos = await audit.session_infos(INTEG, ["s1", "nope"])
    assert list(infos) == ["s1"]


async def test_the_cap_keeps_the_newest_records_of_an_integration(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    audit = store(redis_client, prefix, max_records=3)
    kept = await put(audit, *(entry(n, chat="oc_1" if n % 2 else "oc_2") for n in range(1, 7)))
    assert kept == 3
    keys = KeyBuilder(prefix=prefix)
    assert await redis_client.hlen(keys.audit_records(INTEG)) == 3
    assert ns(await audit.records(INTEG, since_ms=0, limit=10)) == [6, 5, 4]
    # The chat's index may still point at a record the cap took: it is skipped.
    assert ns(await audit.records(INTEG, index="chat", value="oc_1", since_ms=0, limit=10)) == [5]


async def test_retention_trims_on_write_and_every_key_expires(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    retention = 60_000
    audit = store(redis_client, prefix, retention_ms=retention)
    old = AuditEntry("old", INTEG, "oc_1", "s1", "done", NOW - 2 * retention, '{"n": 0}')
    await put(audit, old)
    assert ns(await audit.records(INTEG, since_ms=0, limit=10)) == []  # trimmed as it was written
    await put(audit, entry(99))
    keys = KeyBuilder(prefix=prefix)
    names = [
        keys.audit_records(INTEG),
        keys.audit_ends(INTEG),
        keys.audit_chat(INTEG, "oc_1"),
        keys.audit_session(INTEG, "s1"),
        keys.audit_outcome(INTEG, "done"),
        keys.audit_sessions(INTEG),
        keys.audit_session_info(INTEG),
    ]
    for name in names:
        ttl = await redis_client.pttl(name)
        assert 0 < ttl <= retention, (name, ttl)
    assert await redis_client.hkeys(keys.audit_records(INTEG)) == ["t99"]
    assert await redis_client.zrange(keys.audit_chat(INTEG, "oc_1"), 0, -1) == ["t99"]


def test_every_key_of_an_integration_is_in_one_slot() -> None:
    keys = KeyBuilder(prefix="xgw")
    names = [
        keys.audit_records(INTEG),
        keys.audit_ends(INTEG),
        keys.audit_chat(INTEG, "o{c}_1"),
        keys.audit_session(INTEG, "s1"),
        keys.audit_outcome(INTEG, "error"),
        keys.audit_sessions(INTEG),
        keys.audit_session_info(INTEG),
        keys.audit_events(INTEG),
    ]
    assert len({key_slot(n.encode()) for n in names}) == 1
    assert keys.audit_records("a") != keys.audit_records("b")
    assert "{lark%7Bmain%7D}" in keys.audit_ends(INTEG)  # braces percent-encoded (key_ids)


async def test_running_says_whose_lease_is_held(redis_client: aioredis.Redis, prefix: str) -> None:
    audit = store(redis_client, prefix)
    keys = KeyBuilder(prefix=prefix)
    await redis_client.set(keys.lease("c1"), "owner", px=10_000)
    await redis_client.hset(keys.binding("c1"), mapping={"sessionId": "s1"})
    await redis_client.hset(keys.binding("c2"), mapping={"sessionId": "s2"})
    now = await audit.running(["c1", "c2", "c1"])
    assert now == {"c1": (True, {"sessionId": "s1"}), "c2": (False, {"sessionId": "s2"})}


async def test_events_come_newest_first(redis_client: aioredis.Redis, prefix: str) -> None:
    audit = store(redis_client, prefix)
    for n in range(3):
        await redis_client.xadd(KeyBuilder(prefix=prefix).audit(), {"event": "e", "n": str(n)})
    assert [r["n"] for r in await audit.events(2)] == ["2", "1"]


def turn_row(n: int) -> dict[str, str]:
    return {"event": "turn", "turn": f"t{n}", "integrationId": INTEG}


async def test_a_record_and_its_turn_row_go_in_one_script_call(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    keys = KeyBuilder(prefix=prefix)
    records = SessionRecords(client=redis_client, keys=keys)
    pipe = ScriptPipe(redis_client, name=f"{prefix}-scripts")
    records.use_pipe(pipe)
    try:
        writes = records.turn_writes(
            "s1", {}, turn_row(1), entry=entry(1), session={"chatId": "oc_1"}, now_ms=NOW
        )
        assert len(writes) == 1  # no variable changed: the record and its row, nothing else
        await asyncio.gather(*writes)
        # One script call (a server that did not have the script yet gets it resent as EVAL).
        assert pipe.stats.calls - pipe.stats.script_reloads == 1
        assert await redis_client.hkeys(keys.audit_records(INTEG)) == ["t1"]
        [(_id, row)] = await redis_client.xrange(keys.audit_events(INTEG))
        assert row == turn_row(1)
        assert not await redis_client.exists(keys.audit())  # the global stream is not written
        # Kept as long as the rest of the integration's trail.
        ttl = await redis_client.pttl(keys.audit_events(INTEG))
        assert 0 < ttl <= AuditLimits().retention_ms
        # A row without a record (no caller sends one today) still reaches the global stream.
        [alone] = records.turn_writes("", {}, {"event": "turn", "turn": "t2"})
        await alone
        [(_id, row)] = await redis_client.xrange(keys.audit())
        assert row == {"event": "turn", "turn": "t2"}
    finally:
        await pipe.close()


async def test_an_integrations_stream_keeps_about_maxlen_rows(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    audit = store(redis_client, prefix)
    for n in range(300):
        e = entry(n)
        await audit.put(e, now_ms=NOW, session={}, row=turn_row(n), maxlen=10)
    kept = await redis_client.xlen(KeyBuilder(prefix=prefix).audit_events(INTEG))
    assert 10 <= kept < 300  # MAXLEN ~ trims whole nodes of the stream
    assert [r["turn"] for r in await audit.events(2, [INTEG])] == ["t299", "t298"]


async def test_events_merge_the_global_stream_with_each_integrations(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    """Newest first by stream id, across the global stream (other events, and the turn rows an
    older version wrote there) and the integrations' own; ``count`` and ``event`` hold."""
    audit = store(redis_client, prefix)
    keys = KeyBuilder(prefix=prefix)
    other = "dingtalk-1"
    order: list[str] = []
    for n in range(6):
        if n % 3 == 0:  # an event of the global stream (n == 0: an old version's turn row)
            fields = {"event": "turn" if n == 0 else "session.end", "n": str(n)}
            await redis_client.xadd(keys.audit(), fields)
        else:
            integ = INTEG if n % 3 == 1 else other
            e = AuditEntry(f"t{n}", integ, "oc_1", "s1", "done", NOW, "{}")
            await audit.put(e, now_ms=NOW, session={}, row={"event": "turn", "n": str(n)})
        order.append(str(n))
        await asyncio.sleep(0.002)  # stream ids a millisecond apart, on any node
    every = await audit.events(10, [INTEG, other])
    assert [r["n"] for r in every] == order[::-1]
    assert [r["n"] for r in await audit.events(4, [INTEG, other])] == ["5", "4", "3", "2"]
    assert [r["n"] for r in await audit.events(2, [INTEG, other], event="turn")] == ["5", "4"]
    assert [r["n"] for r in await audit.events(9, [INTEG, other], event="turn")] == [
        "5",
        "4",
        "2",
        "1",
        "0",
    ]
    assert [r["n"] for r in await audit.events(9, [INTEG], event="session.end")] == ["3"]
    assert [r["n"] for r in await audit.events(9)] == ["3", "0"]  # the global stream alone


@pytest.mark.parametrize("bad", ["{", "a}b"])
def test_braces_in_an_integration_id_stay_inside_the_tag(bad: str) -> None:
    key = KeyBuilder().audit_ends(bad)
    assert key.count("{") == 1 and key.count("}") == 1
