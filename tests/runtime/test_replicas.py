"""Several daemon processes on one Redis (docs/architecture.md, invariants 2, 3, 5), a single server
and a Redis Cluster."""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from sessions import KeyBuilder
from tests.support.configs import base_config
from tests.support.helpers import ConsoleClient, DaemonProcess
from tests.support.redis_targets import BOTH_REDIS
from tests.support.waits import eventually

pytestmark = [pytest.mark.slow, BOTH_REDIS]


def replica_config(prefix: str, **echo: Any) -> dict[str, Any]:
    config = base_config(prefix)
    config["experts"] = [
        {"id": "echo", "kind": "echo", "stepDelayMs": 30, "charDelayMs": 5, "chunkChars": 3, **echo}
    ]
    config["logging"] = {"level": "info", "format": "json"}
    return config


@pytest.fixture
async def daemons(tmp_path: Path, redis_client: aioredis.Redis):  # type: ignore[no-untyped-def]
    started: list[DaemonProcess] = []

    async def start(config: dict[str, Any], name: str) -> DaemonProcess:
        daemon = DaemonProcess(config, tmp_path, name)
        await daemon.start()
        started.append(daemon)
        return daemon

    try:
        yield start
    finally:
        for daemon in started:
            await daemon.stop()


async def test_redelivery_to_another_replica_makes_no_second_reply(daemons, prefix) -> None:  # type: ignore[no-untyped-def]
    a = await daemons(replica_config(prefix), "a")
    b = await daemons(replica_config(prefix), "b")
    await a.client.send("deliver me once", event_id="lark-evt-42")
    await b.client.send("deliver me once", event_id="lark-evt-42")
    await a.client.wait_cards()
    await asyncio.sleep(0.5)  # subprocess daemons: no idle() to await; a second card would be here
    for client in (a.client, b.client):
        assert len(await client.cards()) == 1
        assert len([m for m in await client.messages() if m["role"] == "user"]) == 1


async def test_one_run_per_session_across_replicas_in_arrival_order(  # type: ignore[no-untyped-def]
    daemons, prefix, redis_client
) -> None:
    a = await daemons(replica_config(prefix), "a")
    b = await daemons(replica_config(prefix), "b")
    chats = [f"dm-{name}" for name in ("alice", "bob", "carol")]
    sent: dict[str, list[str]] = defaultdict(list)

    async def send_round(i: int, clients: tuple[ConsoleClient, ...]) -> None:
        for j, chat in enumerate(chats):
            client = clients[(i + j) % len(clients)]
            text = f"{chat} message {i}"
            await client.send(text, chat=chat, sender=chat[3:])
            sent[chat].append(text)
        await asyncio.sleep(0.03)  # rounds spread over time are the input

    async def all_answered() -> bool:
        for chat in chats:
            cards = await a.client.cards(chat)
            if any(c["card"]["status"] != "done" for c in cards):
                return False
            lines = [
                ln[2:]
                for c in cards
                for ln in c["card"]["answer"].splitlines()
                if ln.startswith("> ")
            ]
            if len(lines) < len(sent[chat]):
                return False
        return True

    async def audit() -> tuple[dict[str, dict[str, list[int]]], set[str]]:
        # The turn rows: the integration's event stream (sessions/audit.py).
        rows = await redis_client.xrange(KeyBuilder(prefix=prefix).audit_events("console"))
        spans: dict[str, dict[str, list[int]]] = defaultdict(dict)
        replicas: set[str] = set()
        for _id, fields in rows:
            if fields["event"] == "turn":
                spans[fields["conversation"]][fields["turn"]] = [
                    int(fields["start"]),
                    int(fields["end"]),
                ]
                replicas.add(fields.get("replica"))
        return spans, replicas

    for i in range(8):
        await send_round(i, (a.client, b.client))
    await eventually(all_answered, timeout=60, interval=0.2)
    spans, replicas = await audit()
    # On a loaded machine one replica may claim every turn (each polls the other's work too);
    # a few more rounds through the idle one make both run turns, which this test is about.
    for i in range(8, 16):
        if len(replicas) == 2:
            break
        await send_round(i, ((a.client,), (b.client,))[i % 2])  # a round through one replica
        await eventually(all_answered, timeout=60, interval=0.2)
        spans, replicas = await audit()
    for chat in chats:
        cards = await a.client.cards(chat)
        lines = [
            ln[2:] for c in cards for ln in c["card"]["answer"].splitlines() if ln.startswith("> ")
        ]
        assert lines == sent[chat]  # nothing lost, nothing doubled, arrival order kept

    # The audit trail: per conversation, no two turns overlap, whichever replica ran them.
    assert len(replicas) == 2, "both replicas should have run turns"
    for conv, turns in spans.items():
        intervals = sorted((v[0], v[-1]) for v in turns.values())
        for (_s1, e1), (s2, _e2) in itertools.pairwise(intervals):
            assert s2 >= e1, f"overlapping turns in {conv}: {intervals}"


async def test_replica_killed_mid_turn_is_finished_by_another_in_the_same_card(  # type: ignore[no-untyped-def]
    daemons, prefix
) -> None:
    slow = replica_config(prefix, stepDelayMs=200, charDelayMs=60, chunkChars=2)
    a = await daemons(slow, "a")
    await a.client.send("survive a crash please")
    [card] = await a.client.wait_cards(status="running")
    await eventually(lambda: _answer_started(a, card["id"]), timeout=10)
    a.kill(signal.SIGKILL)
    b = await daemons(slow, "b")
    [final] = await b.client.wait_cards(status="done", timeout=30)
    assert final["id"] == card["id"]  # the same card, updated in place
    assert final["card"]["answer"] == "You said:\n> survive a crash please"
    assert len(await b.client.cards()) == 1
    log = b.log_path.read_text()
    assert any(
        json.loads(line).get("event") == "resuming a turn left by another replica"
        for line in log.splitlines()
        if line.startswith("{")
    )


async def _answer_started(daemon: DaemonProcess, card_id: str) -> bool:
    cards = {c["id"]: c for c in await daemon.client.cards()}
    return len(cards[card_id]["card"]["answer"]) > 0


async def test_sigterm_hands_back_a_long_turn(daemons, prefix) -> None:  # type: ignore[no-untyped-def]
    config = replica_config(prefix, stepDelayMs=300, charDelayMs=80, chunkChars=2)
    config["runtime"]["shutdownGraceSeconds"] = 0.2
    a = await daemons(config, "a")
    await a.client.send("hand me over")
    [card] = await a.client.wait_cards(status="running")
    b = await daemons(config, "b")
    a.kill(signal.SIGTERM)
    [final] = await b.client.wait_cards(status="done", timeout=30)
    assert final["id"] == card["id"]
    assert final["card"]["answer"] == "You said:\n> hand me over"
