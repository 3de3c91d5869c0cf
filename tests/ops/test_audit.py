"""The session audit trail end to end (real daemon, real Redis, the console as the chat): one
record per turn with its trigger, input, context, steps, usage, outcome and timings; the admin
API's filters, order and refusals; the sessions listing, live and recent."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from gateway.experts.base import TurnInput
from gateway.turns.audit import context_of
from gateway.turns.audit_record import INPUT_BYTES, bounded
from sessions import KeyBuilder
from tests.fakes.experts import FakeOpenAI
from tests.support.admin import TOKEN, admin
from tests.support.configs import base_config, openai_expert
from tests.support.events import GENERIC_SECRET, generic
from tests.support.helpers import ConsoleClient, InProcessGateway, serve
from tests.support.redis_targets import BOTH_REDIS
from tests.support.waits import eventually

STEPS = ["Reading your message", "Thinking it over", "Writing the answer"]


def config(prefix: str, **integration: Any) -> dict[str, Any]:
    cfg = base_config(prefix, **integration)
    cfg["admin"] = {"token": TOKEN}
    return cfg


def slow(prefix: str, **integration: Any) -> dict[str, Any]:
    cfg = config(prefix, **integration)
    cfg["experts"][0].update(stepDelayMs=150, charDelayMs=40)
    return cfg


async def records(console: ConsoleClient, count: int, **query: str) -> list[dict[str, Any]]:
    """The audit API's answer once it holds ``count`` records (they are written as turns end)."""

    async def enough() -> list[dict[str, Any]] | None:
        status, body = await admin(console, "GET", "/v1.0/audit", **query)
        assert status == 200, body
        result: list[dict[str, Any]] = body["result"]
        return result if len(result) >= count else None

    found: list[dict[str, Any]] = await eventually(enough, timeout=15)
    return found


@pytest.fixture
async def openai() -> AsyncIterator[tuple[FakeOpenAI, str]]:
    fake = FakeOpenAI()
    async for url in serve(fake.app()):
        yield fake, url + "/v1"


# --- what a record holds -------------------------------------------------------------------
async def test_a_message_turn_records_its_input_context_steps_and_timings(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway(config(prefix, historyContextLimit=5, language="zh-Hans"))
    await console.send("/remember Answer briefly", chat="team", mention=True)
    await eventually(lambda: _texts_with(console, "team", "Remembered"))
    await console.send("lunch anyone?", chat="team", sender="bob")  # seen, not addressed
    before = int(time.time() * 1000)
    await console.send("what is our plan?", chat="team", sender="carol", mention=True)
    await console.wait_cards(chat="team")
    [record] = await records(console, 1)
    _, body = await admin(console, "GET", "/v1.0/sessions", integrationId="console")
    [session] = body["result"]
    assert record["event"] == "turn" and record["outcome"] == "done" and record["error"] == ""
    assert record["trigger"] == {"kind": "message", "id": None, "action": None, "source": None}
    assert (record["integrationId"], record["platform"]) == ("console", "console")
    assert (record["chatId"], record["chatType"], record["senderId"]) == ("team", "group", "carol")
    assert record["conversation"] == "console|group:team"
    assert record["sessionId"] == session["sessionId"]
    assert (record["attempt"], record["resumed"]) == (1, False)
    assert record["id"].startswith(record["turnId"] + "-")
    assert record["input"] == {
        "text": "what is our plan?",
        "chars": 17,
        "truncated": False,
        "messages": 1,
        "sha256": hashlib.sha256(b"what is our plan?").hexdigest(),
        "senders": ["carol"],  # every sender whose message went into the turn (issue 36)
        "steered": 0,
    }
    context = record["context"]
    assert {"sys.language", "sys.date", "memory.rules"} <= set(context["variables"])
    assert context["variableCount"] == len(context["variables"])
    assert (context["history"], context["memoryRules"], context["attachments"]) == (1, 1, 0)
    assert record["expert"] == {"id": "echo", "kind": "echo", "model": None}
    assert [s["title"] for s in record["steps"]] == STEPS
    for step in record["steps"]:
        assert step["kind"] == "step" and step["status"] == "done"
        assert step["endedAt"] - step["startedAt"] == step["ms"] >= 0
    assert record["usage"] is None  # the echo expert reports none
    assert record["answer"] == "You said:\n> what is our plan?"
    t = record["timings"]
    assert before <= t["receivedAt"] <= t["claimedAt"] <= t["firstCardAt"] <= t["finishedAt"]
    assert t["queuedMs"] == t["claimedAt"] - t["receivedAt"]
    assert t["firstCardMs"] == t["firstCardAt"] - t["receivedAt"]
    assert t["runMs"] == t["finishedAt"] - t["claimedAt"]
    steps = record["steps"]
    assert t["claimedAt"] <= steps[0]["startedAt"] and steps[-1]["endedAt"] <= t["finishedAt"]
    assert record["replica"]
    assert session["turns"] == 1 and session["lastOutcome"] == "done"
    assert session["outcomes"] == {"done": 1} and session["live"] is False


async def _texts_with(console: ConsoleClient, chat: str, fragment: str) -> bool:
    return any(fragment in t for t in await console.texts(chat))


async def test_tokens_and_the_model_of_an_expert_that_reports_usage(
    openai: tuple[FakeOpenAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    _fake, url = openai
    cfg = config(prefix, xpertId="gpt")
    cfg["experts"].append(openai_expert(url))
    console = await make_gateway(cfg)
    await console.send("how many tokens?")
    await console.wait_cards()
    [record] = await records(console, 1)
    assert record["expert"] == {"id": "gpt", "kind": "openai", "model": "qwen2.5"}
    assert record["usage"] == {"inputTokens": 12, "outputTokens": 7, "cost": None}
    [step] = record["steps"]
    assert (step["title"], step["status"]) == ("Asking qwen2.5", "done")
    assert record["answer"] == "Echo: how many tokens?"


async def test_a_failed_turn_records_its_error(
    openai: tuple[FakeOpenAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    _fake, url = openai
    cfg = config(prefix, xpertId="gpt")
    cfg["experts"].append(openai_expert(url, model="missing"))
    console = await make_gateway(cfg)
    await console.send("this will fail")
    await console.wait_cards(status="error")
    [record] = await records(console, 1, outcome="error")
    assert record["outcome"] == "error" and "not found" in record["error"]
    assert record["steps"][0]["status"] == "failed"
    assert record["usage"] is None


async def test_a_stopped_turn_is_cancelled(make_gateway: Callable[..., Any], prefix: str) -> None:
    console = await make_gateway(slow(prefix))
    await console.send("a long answer " * 10)
    [card] = await console.wait_cards(status="running")
    assert await console.click("dm-alice", card["id"], "stop") == 202
    await console.wait_cards(status="cancelled")
    [record] = await records(console, 1)
    assert record["outcome"] == "cancelled" and record["error"] == ""
    assert any(s["status"] == "cancelled" for s in record["steps"])
    assert all(s["ms"] is not None for s in record["steps"])


async def test_confirm_is_a_button_turn_of_the_same_session(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway(config(prefix))
    await console.send("[confirm] drop the table")
    [card] = await console.wait_cards(status="waiting")
    await console.click("dm-alice", card["id"], "confirm")
    await console.wait_cards(status="done")
    resumed, asked = await records(console, 2)  # newest first
    assert asked["outcome"] == "interrupted" and asked["trigger"]["kind"] == "message"
    assert resumed["trigger"] == {
        "kind": "button",
        "id": None,
        "action": "confirm",
        "source": None,
    }
    assert resumed["outcome"] == "done" and resumed["sessionId"] == asked["sessionId"]
    assert resumed["input"]["text"] == "[confirm] drop the table"
    # The step shown before the question is carried over without times of this turn.
    first, *ran = resumed["steps"]
    assert (first["title"], first["startedAt"], first["ms"]) == (STEPS[0], None, None)
    assert [s["title"] for s in ran] == STEPS[1:] and all(s["ms"] is not None for s in ran)
    _, body = await admin(console, "GET", f"/v1.0/sessions/{asked['sessionId']}/audit")
    assert [r["id"] for r in body["result"]] == [asked["id"], resumed["id"]]  # in order


async def test_a_turn_handed_back_and_resumed_has_a_record_per_attempt(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    cfg = slow(prefix)
    cfg["runtime"]["shutdownGraceSeconds"] = 0.3
    first = InProcessGateway(cfg)
    await first.start()
    try:
        await first.client.send("a long answer that outlives the shutdown " * 4)
        await first.client.wait_cards(status="running")
    finally:
        await first.stop()  # hands the running turn back
    console = await make_gateway(cfg)
    await console.wait_cards(timeout=30)
    resumed, handed = await records(console, 2)
    assert handed["turnId"] == resumed["turnId"] and handed["id"] != resumed["id"]
    # A hand-back is no failed attempt (runtime.maxTurnAttempts counts crashes).
    assert (handed["outcome"], handed["attempt"], handed["resumed"]) == ("handback", 1, False)
    assert (resumed["outcome"], resumed["attempt"], resumed["resumed"]) == ("done", 1, True)
    assert handed["replica"] != resumed["replica"]
    assert handed["steps"] and handed["steps"][0]["title"] == STEPS[0]  # as the run left them


async def test_schedule_watch_and_event_turns_name_their_trigger(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    cfg = config(
        prefix,
        watches=[{"id": "incidents", "match": {"keywords": ["P0"]}, "text": "Triage this."}],
        events=[{"source": "generic", "secret": GENERIC_SECRET, "chatId": "ops"}],
    )
    cfg["schedules"] = [
        {
            "id": "tick",
            "integrationId": "console",
            "chatId": "dm-bob",
            "chatType": "p2p",
            "cron": "* * * * * *",
            "text": "scheduled hello",
        }
    ]
    console = await make_gateway(cfg)
    await console.send("P0: checkout is down", chat="team", sender="bob")
    status, _ = await generic(console, {"key": "inc-7", "title": "Disk full", "status": "open"})
    assert status == 202
    await console.wait_cards(chat="team")
    await console.wait_cards(chat="ops")
    await console.wait_cards(chat="dm-bob")
    triggers = {
        r["chatId"]: r["trigger"] for r in await records(console, 3) if r["chatId"] != "dm-bob"
    }
    [scheduled, *_] = await records(console, 1, chatId="dm-bob")
    assert triggers["team"] == {"kind": "watch", "id": "incidents", "action": None, "source": None}
    assert triggers["ops"]["kind"] == "event" and triggers["ops"]["source"] == "generic"
    assert scheduled["trigger"] == {
        "kind": "schedule",
        "id": "tick",
        "action": None,
        "source": None,
    }
    assert scheduled["input"]["text"] == "scheduled hello"


async def test_the_merged_input_is_bounded_on_a_character_boundary(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway(config(prefix))
    text = "日本語のテキスト" * 500  # 4000 characters, 12000 bytes
    await console.send(text)
    await console.wait_cards(timeout=30)
    [record] = await records(console, 1)
    cut = record["input"]
    assert cut["truncated"] is True and cut["chars"] == 4000
    assert len(cut["text"].encode()) <= INPUT_BYTES
    assert text.startswith(cut["text"].split(" …[cut:")[0])
    assert cut["text"].endswith("…[cut: 4000 characters in all]")
    assert len(record["answer"].encode()) <= 2048
    # What was cut is still identified: its whole length and hash beside it.
    assert cut["sha256"] == hashlib.sha256(text.encode()).hexdigest()
    whole = "You said:\n> " + text
    assert (record["answerChars"], record["answerSha256"]) == (
        len(whole),
        hashlib.sha256(whole.encode()).hexdigest(),
    )


def test_bounded_keeps_short_text_and_cuts_between_characters() -> None:
    assert bounded("hello", 10) == ("hello", False)
    cut, was_cut = bounded("é" * 100, 60)
    assert was_cut and len(cut.encode()) <= 60 and cut.startswith("é")
    assert "\ufffd" not in cut


def test_the_context_counts_attachments_by_kind() -> None:
    turn = TurnInput(
        turn_id="t",
        session_id="s",
        integration_id="i",
        xpert_id="x",
        text="hi",
        chat_id="c",
        chat_type="group",
        sender_id="u",
        attachments=({"kind": "image", "key": "a"}, {"kind": "file", "key": "b"}),
        variables={"sys.language": "en", "var.topic": "x"},
        group_history=({"name": "bob", "text": "hey"},),
        memory_rules=2,
    )
    context = context_of(turn).model_dump(by_alias=True)
    assert context == {
        "variables": ["sys.language", "var.topic"],
        "variableCount": 2,
        "history": 1,
        "attachments": 2,
        "attachmentKinds": ["file", "image"],
        "memoryRules": 2,
    }


def test_the_record_body_is_what_the_typed_record_dumps() -> None:
    """A turn's record is built as a dict (audit_body) for speed; AuditRecord is its schema."""
    from gateway.envelope import Action, Chat, Envelope, Sender
    from gateway.events import StepEvent, UsageEvent
    from gateway.progress import Progress
    from gateway.turns.audit import TurnFacts, TurnTrace, audit_body
    from gateway.turns.audit_record import AuditRecord
    from gateway.turns.records import TurnTimings

    chat, sender = Chat(id="c", type="group"), Sender(id="u", name="U")
    message = Envelope(
        integration_id="i", platform="console", event_id="e", chat=chat, sender=sender
    )
    click = message.model_copy(update={"kind": "action", "action": Action(id="retry")})
    trace = TurnTrace(clock=lambda: 5)
    trace.see(StepEvent("s0", "Step", "running"))
    trace.see(UsageEvent(input_tokens=3, output_tokens=4, cost=0.5))
    final = Progress(turn_id="t").apply(StepEvent("s0", "Step", "done")).finish("success")
    for items, turn_trace, xpert in (([message], trace, "x"), ([message, click], None, "")):
        facts = TurnFacts(
            claim_turn_id="t",
            attempt=1,
            resumed=False,
            conversation="i|group:c",
            items=items,
            outcome="done",
            timings=TurnTimings(received=1, claimed=2, finished=9, first_card=3),
            replica="r",
            claim_id="k",
            xpert_id=xpert,
            final=final,
        )
        body = audit_body(facts, turn_trace)
        assert AuditRecord.model_validate(body).model_dump(by_alias=True) == body
        assert list(AuditRecord.model_validate(body).model_dump(by_alias=True)) == list(body)


# --- the admin API -------------------------------------------------------------------------
@BOTH_REDIS
async def test_the_audit_api_filters_newest_first(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway(config(prefix))
    await console.send("one", chat="team", mention=True)
    await console.wait_cards(chat="team")
    await console.send("two")
    await console.wait_cards()
    await console.send("three [confirm]", chat="team", mention=True)
    await console.wait_cards(chat="team", count=2, status=None)
    everything = await records(console, 3)
    assert [r["input"]["text"] for r in everything] == ["three [confirm]", "two", "one"]
    ends = [r["timings"]["finishedAt"] for r in everything]
    assert ends == sorted(ends, reverse=True)

    async def texts(**query: str) -> list[str]:
        status, body = await admin(console, "GET", "/v1.0/audit", **query)
        assert status == 200, body
        return [r["input"]["text"] for r in body["result"]]

    assert await texts(limit="2") == ["three [confirm]", "two"]
    assert await texts(count="1") == ["three [confirm]"]  # count: the old name of limit
    assert await texts(integrationId="console", chatId="team") == ["three [confirm]", "one"]
    assert await texts(outcome="interrupted") == ["three [confirm]"]
    assert await texts(chatId="team", outcome="done") == ["one"]
    middle = everything[1]["timings"]["finishedAt"]
    assert await texts(since=str(middle)) == ["three [confirm]", "two"]
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(middle / 1000 + 3600))
    assert await texts(since=iso + "+00:00") == []
    session = everything[-1]["sessionId"]
    assert await texts(sessionId=session) == ["three [confirm]", "one"]
    assert await texts(integrationId="other") == []
    assert await texts(sessionId="nosuchsession") == []


async def test_bad_queries_are_400s_and_a_bad_token_401(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway(config(prefix))
    bad = [
        ("/v1.0/audit", {"limit": "0"}),
        ("/v1.0/audit", {"count": "-1"}),
        ("/v1.0/audit", {"limit": "ten"}),
        ("/v1.0/audit", {"outcome": "won"}),
        ("/v1.0/audit", {"since": "yesterday"}),
        ("/v1.0/audit", {"integrationId": "no spaces"}),
        ("/v1.0/audit", {"sessionId": "a/b"}),
        ("/v1.0/audit", {"chatId": "a\x01b"}),
        ("/v1.0/audit/events", {"event": "DROP TABLE"}),
        ("/v1.0/sessions", {"status": "dead"}),
        ("/v1.0/sessions", {"outcome": "x"}),
        ("/v1.0/sessions/abc/audit", {"limit": "0"}),
    ]
    for path, query in bad:
        status, body = await admin(console, "GET", path, **query)
        assert (status, body["success"], body["code"]) == (400, False, "bad_request"), (path, body)
    status, body = await admin(console, "GET", "/v1.0/audit", limit="5000")
    assert status == 200  # above the maximum: the maximum
    for path in ("/v1.0/audit", "/v1.0/audit/events", "/v1.0/sessions", "/v1.0/sessions/x/audit"):
        status, body = await admin(console, "GET", path, token="wrong")
        assert (status, body["code"]) == (401, "unauthorized")
    status, body = await admin(console, "GET", "/v1.0/sessions/nope/audit")
    assert (status, body["code"]) == (404, "not_found")


async def test_sessions_are_listed_live_then_recent(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway(slow(prefix))
    await console.send("first, quickly")
    await console.wait_cards()
    await console.send("a slow one " * 20, chat="team", mention=True)
    await console.wait_cards(chat="team", status="running")

    async def listed(**query: str) -> list[dict[str, Any]]:
        status, body = await admin(console, "GET", "/v1.0/sessions", **query)
        assert status == 200, body
        return list(body["result"])

    [live] = await listed(status="live")
    assert (live["chatId"], live["live"], live["status"], live["turns"]) == (
        "team",
        True,
        "active",
        0,
    )
    [recent] = await listed(status="recent")
    assert (recent["chatId"], recent["live"], recent["turns"]) == ("dm-alice", False, 1)
    assert [s["chatId"] for s in await listed()] == ["team", "dm-alice"]  # live first
    await console.wait_cards(chat="team", timeout=30)
    await eventually(lambda: _none_live(console), timeout=10)
    both = await listed(integrationId="console")
    assert [s["chatId"] for s in both] == ["team", "dm-alice"]  # most recently active first
    assert [s["chatId"] for s in await listed(chatId="dm-alice")] == ["dm-alice"]
    assert await listed(outcome="error") == []
    assert len(await listed(outcome="done", limit="1")) == 1
    sid = both[0]["sessionId"]
    _, body = await admin(console, "GET", f"/v1.0/sessions/{sid}")
    assert body["result"]["turns"] == 1 and body["result"]["lastOutcome"] == "done"


async def _none_live(console: ConsoleClient) -> bool:
    _, body = await admin(console, "GET", "/v1.0/sessions", status="live")
    return body["result"] == []


@BOTH_REDIS
async def test_the_event_stream_keeps_session_ends_newest_first(
    make_gateway: Callable[..., Any], prefix: str, redis_client: aioredis.Redis
) -> None:
    """Session ends (the global stream) and turn rows (each integration's stream, written with
    the turn's record) come back merged, newest first, with a turn row an older version wrote
    to the global stream."""
    keys = KeyBuilder(prefix=prefix)
    await redis_client.xadd(keys.audit(), {"event": "turn", "turn": "old", "resumed": "0"})
    console = await make_gateway(config(prefix))
    await console.send("hello")
    await console.wait_cards()
    await console.send("/new")
    await eventually(lambda: _texts_with(console, "dm-alice", "new conversation"))

    async def events(**query: str) -> list[dict[str, Any]]:
        status, body = await admin(console, "GET", "/v1.0/audit/events", **query)
        assert status == 200, body
        return list(body["result"])

    [end] = await events(event="session.end")
    assert (end["by"], end["conversation"]) == ("user", "console|p2p:dm-alice")
    rows = await events(limit="5")
    assert [r["event"] for r in rows] == ["session.end", "turn", "turn"]
    assert rows[2]["turn"] == "old" and rows[1]["integrationId"] == "console"
    assert json.loads(rows[1]["resumed"]) == 0
    assert [r["event"] for r in await events(limit="2")] == ["session.end", "turn"]
    turns = await events(event="turn")
    assert [r["turn"] for r in turns] == [rows[1]["turn"], "old"]
    assert [r["turn"] for r in await events(event="turn", limit="1")] == [rows[1]["turn"]]
    # The new row is in the integration's stream, not the global one.
    [(_id, row)] = await redis_client.xrange(keys.audit_events("console"))
    assert row["turn"] == rows[1]["turn"]
    assert [f["event"] for _id, f in await redis_client.xrange(keys.audit())] == [
        "turn",
        "session.end",
    ]


async def test_the_configured_retention_reaches_the_stored_trail(
    make_gateway: Callable[..., Any], prefix: str, redis_client: aioredis.Redis
) -> None:
    cfg = config(prefix)
    cfg["audit"] = {"retentionDays": 0.5, "maxRecords": 100}
    console = await make_gateway(cfg)
    await console.send("hello")
    await console.wait_cards()
    await records(console, 1)
    ttl = await redis_client.pttl(KeyBuilder(prefix=prefix).audit_ends("console"))
    assert 43_000_000 < ttl <= 43_200_000
