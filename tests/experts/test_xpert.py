"""The xpert backend end to end against a fake XpertAI that behaves as the real server does
(tests/fakes/xpertai.py): console -> daemon -> fake XpertAI -> card."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest

from sessions.keys import KeyBuilder
from sessions.records_admin import SessionRecords
from tests.fakes.xpertai import API_KEY, FakeXpertAI
from tests.fakes.xpertai_agent import dumps
from tests.support.admin import TOKEN, admin
from tests.support.helpers import ConsoleClient, serve
from tests.support.waits import eventually
from tests.support.xpert import config


async def test_a_run_shows_its_tool_and_steps_streams_the_answer_and_ends_done(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = xpert
    console: ConsoleClient = await make_gateway(config(prefix, url))
    await console.send("what is our refund policy?")
    [card] = await console.wait_cards()
    assert card["card"]["answer"] == "Hello from xpert [what is our refund policy?]"
    assert card["card"]["tools"] == [{"title": "Search the wiki", "status": "done", "detail": ""}]
    assert card["card"]["steps"] == [{"title": "Planning", "status": "done"}]  # no middleware
    assert "hidden thoughts" not in str(card)  # reasoning is not shown
    [thread] = fake.threads.values()
    assert thread.assistant == "sales"  # the thread is bound to the xpert
    first = fake.requests[0]
    assert first["assistant_id"] == "sales" and first["input"]["action"] == "send"
    assert first["input"]["message"]["input"] == {"input": "what is our refund policy?"}
    headers = fake.headers[-1]
    assert headers["x-api-key"] == API_KEY and headers["organization-id"] == "org-1"
    assert headers["x-principal-user-id"] == "u-42"
    await console.send("and for digital goods?")
    await console.wait_cards(count=2)
    assert len(fake.threads) == 1 and fake.requests[1]["thread"] == thread.id


@pytest.mark.parametrize(
    ("decision", "status", "answer", "tools"),
    [
        (
            "confirm",
            "done",
            "Email sent to the team.",
            [{"title": "Send email", "status": "done", "detail": ""}],
        ),
        ("reject", "rejected", "Not sent: you rejected it.", []),
    ],
)
async def test_an_interrupt_waits_and_the_decision_resumes_that_run(
    xpert: tuple[FakeXpertAI, str],
    make_gateway: Callable[..., Any],
    prefix: str,
    decision: str,
    status: str,
    answer: str,
    tools: list[dict[str, str]],
) -> None:
    fake, url = xpert
    console = await make_gateway(config(prefix, url))
    await console.send("mail the report [interrupt]")
    [card] = await console.wait_cards(status="waiting")
    assert card["card"]["title"] == "Run send_email? (to: team)"
    [run] = fake.runs.values()
    assert run.status == "interrupted"
    await console.click("dm-alice", card["id"], decision)
    [card] = await console.wait_cards(status=status)
    assert card["card"]["answer"] == answer  # no frame of the interrupted stream again
    assert card["card"]["tools"] == tools
    resume = fake.requests[1]["input"]
    assert resume["action"] == "resume" and resume["decision"] == {"type": decision}
    assert resume["target"] == {"aiMessageId": run.ai_message, "executionId": run.id}
    # the resume read on after the interrupted run's last frame
    complete_id = next(sid for sid, p in run.log if p.get("type") == "complete")
    assert fake.connections[-1] == (run.id, complete_id)
    assert run.status == "success"


async def test_stop_cancels_the_run_by_its_execution_id(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = xpert
    console = await make_gateway(config(prefix, url))
    await console.send("take your time [slow]")
    [card] = await console.wait_cards(status="running")
    await eventually(lambda: [r for r in fake.runs.values() if r.log])
    await console.click("dm-alice", card["id"], "stop")
    await console.wait_cards(status="cancelled")
    [run] = fake.runs.values()
    await eventually(lambda: fake.cancels == [run.id])
    assert run.status == "interrupted"


async def test_a_dropped_stream_is_rejoined_after_the_last_event_without_doubled_text(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = xpert
    console = await make_gateway(config(prefix, url))
    await console.send("long one [drop]")
    [card] = await console.wait_cards()
    assert card["card"]["answer"] == "Hello from xpert [long one [drop]]"
    [run] = fake.runs.values()
    # the server dropped the connection after four frames; the rejoin asked for what followed
    # the last one that arrived
    first, rejoin = fake.connections
    assert first == (run.id, None)
    assert rejoin[0] == run.id and rejoin[1] in [sid for sid, _ in run.log[:4]]


async def test_a_silent_tool_outlives_the_idle_timeout_while_keep_alives_arrive(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    _fake, url = xpert
    console = await make_gateway(config(prefix, url, {"idleTimeoutSeconds": 0.6}))
    await console.send("crunch the numbers [silent=1.5]")
    [card] = await console.wait_cards()
    assert card["card"]["status"] == "done"
    assert card["card"]["answer"] == "Hello from xpert [crunch the numbers [silent=1.5]]"


async def test_a_silent_stream_without_keep_alives_times_out_with_an_error_card(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake = FakeXpertAI(keepalive_s=30)
    async for url in serve(fake.app()):
        console = await make_gateway(
            config(prefix, url + "/api/ai", {"idleTimeoutSeconds": 0.5, "connectRetries": 0})
        )
        await console.send("are you there [silent=2]")
        [card] = await console.wait_cards(status="error")
        assert "sent nothing for 0.5 s" in card["card"]["error"]


async def test_a_failed_run_shows_the_agents_error_and_offers_retry(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    _fake, url = xpert
    console = await make_gateway(config(prefix, url))
    await console.send("break [fail]")
    [card] = await console.wait_cards(status="error")
    assert card["card"]["error"] == "Model quota exceeded"
    assert [b["actionId"] for b in card["card"]["buttons"]] == ["retry", "new"]


@pytest.mark.parametrize(
    ("expert", "message"),
    [
        ({"apiKey": "sk-x-wrong"}, "the API key was rejected (HTTP 401)"),
        ({"assistantId": "nobody"}, "the agent or model was not found (HTTP 404)"),
    ],
)
async def test_refusals_become_readable_error_cards(
    xpert: tuple[FakeXpertAI, str],
    make_gateway: Callable[..., Any],
    prefix: str,
    expert: dict[str, Any],
    message: str,
) -> None:
    _fake, url = xpert
    console = await make_gateway(config(prefix, url, expert))
    await console.send("hello")
    [card] = await console.wait_cards(status="error")
    assert message in card["card"]["error"]


async def test_variables_go_only_when_new_or_changed_and_the_agents_writes_come_back(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = xpert
    variables = [
        {"name": "topic", "type": "string", "default": "general"},
        {"name": "notes", "type": "array", "reducer": "append", "default": ["seed"]},
    ]
    console = await make_gateway(config(prefix, url, variables=variables))
    await console.send("switch topics [set topic=refunds]")
    await console.wait_cards()
    # the defaults are new on our side: sent once, under their declared names only
    assert fake.requests[0]["input"]["state"] == {"topic": "general", "notes": ["seed"]}
    await console.send("anything else?")
    await console.wait_cards(count=2)
    assert fake.requests[1]["input"]["state"] == {}  # nothing changed: nothing sent again
    [thread] = fake.threads.values()
    assert thread.values["notes"] == ["seed"]  # XpertAI's append reducer saw it once
    sessions = await console.http.get(
        console.base + "/v1.0/sessions",
        params={"integrationId": "console", "chatId": "dm-alice"},
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    sid = (await sessions.json())["result"][0]["sessionId"]
    _, body = await admin(console, "GET", f"/v1.0/sessions/{sid}/variables", prefix="var.")
    values = {v["variable_key"]: v["variable_value"] for v in body["result"]}
    assert values == {"var.topic": "refunds", "var.notes": ["seed"]}  # the agent's write
    assert fake.state_reads  # read back from GET /threads/{id}/state


async def test_a_picture_reaches_the_agent_as_an_inline_file(
    xpert: tuple[FakeXpertAI, str], prefix: str, redis_client: Any
) -> None:
    from tests.fakes.dingtalk import PNG
    from tests.support.dingtalk import robot_message, running

    fake, url = xpert
    experts = [{"id": "sales", "kind": "xpert", "baseUrl": url, "apiKey": API_KEY}]
    async with running(prefix, experts=experts, xpertId="sales") as (dingtalk, harness):
        body = robot_message(dingtalk, "")
        body["msgtype"] = "richText"
        body["content"] = {
            "richText": [{"text": "what is in this picture?"}, {"downloadCode": "dc-42"}]
        }
        status, _ = await harness.post(body)
        assert status == 200
        await eventually(lambda: fake.requests, timeout=15)
    message = fake.requests[0]["input"]["message"]["input"]
    data = base64.b64encode(PNG + b"dc-42").decode()
    assert message["files"] == [
        {"fileUrl": f"data:image/png;base64,{data}", "mimeType": "image/png"}
    ]
    [thread] = fake.threads.values()
    assert thread.files == [("image/png", len(PNG + b"dc-42"))]  # stored as a file asset


async def test_group_memory_goes_as_the_declared_memory_variable(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = xpert
    console = await make_gateway(config(prefix, url, {"memoryVariable": "chat_rules"}))
    await console.send("/remember Answer in bullet points", chat="team", mention=True)
    await eventually(lambda: _texts_contain(console, "team", "Remembered"))
    await console.send("hi", chat="team", mention=True)
    await console.wait_cards(chat="team")
    await console.send("again", chat="team", mention=True)
    await console.wait_cards(chat="team", count=2)
    assert fake.requests[0]["input"]["state"] == {"chat_rules": "1. Answer in bullet points"}
    assert fake.requests[1]["input"]["state"] == {}  # unchanged memory is not sent again


async def _texts_contain(console: ConsoleClient, chat: str, fragment: str) -> bool:
    return any(fragment in t for t in await console.texts(chat))


async def test_recent_group_messages_go_before_the_question_as_context(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = xpert
    console = await make_gateway(config(prefix, url, historyContextLimit=2))
    for i, who in enumerate(("bob", "carol", "bob")):
        await console.send(f"chatter {i}", chat="team", sender=who)
    await console.send("summarise please", chat="team", mention=True)
    await console.wait_cards(chat="team")
    text = fake.requests[0]["input"]["message"]["input"]["input"]
    assert text == (
        "Recent messages in this group chat:\n- Carol: chatter 1\n- Bob: chatter 2\n\n"
        "summarise please"
    )
    assert "group_history" not in fake.requests[0]["input"]["state"]


async def test_sys_language_email_and_time_zone_are_the_principal_users(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    """sys.* for xpert: XpertAI takes language, user_email and timezone (and date, datetime,
    thread_id and the workspace keys) from the principal user (x-principal-user-id) and
    overwrites those keys whatever a client sends; the integration's own language and time zone
    settings do not reach it. (A client's other sys.* keys would be kept: test_xpertai_fake.py.)
    The gateway sends no sys.*."""
    fake, url = xpert
    console = await make_gateway(config(prefix, url, language="fr-FR", timezone="Europe/Paris"))
    await console.send("bonjour")
    await console.wait_cards()
    [thread] = fake.threads.values()
    sys = thread.values["sys"]
    assert (sys["language"], sys["user_email"], sys["timezone"]) == (
        "zh-Hans",
        "alice@example.com",
        "Asia/Shanghai",
    )  # u-42's profile, not the integration's fr-FR / Europe/Paris
    assert sys["thread_id"] == thread.id
    assert "sys" not in fake.requests[0]["input"]["state"]


async def test_a_tool_output_larger_than_a_mib_on_one_line_does_not_break_the_turn(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = xpert
    console = await make_gateway(config(prefix, url))
    await console.send("read it all [big]")
    [card] = await console.wait_cards()
    [run] = fake.runs.values()
    assert max(len(dumps(p)) for _, p in run.log) > 1024 * 1024  # one data: line
    assert card["card"]["answer"] == "Hello from xpert [read it all [big]]"
    assert card["card"]["tools"] == [{"title": "Search the wiki", "status": "done", "detail": ""}]


async def test_a_component_update_without_status_keeps_the_tools_status(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    """A Tavily-like tool's own message after its end: the same id, category 'Computer' and no
    status (xpert-agent/agent.ts ON_TOOL_MESSAGE)."""
    fake, url = xpert
    console = await make_gateway(config(prefix, url))
    await console.send("look it up [web]")
    [card] = await console.wait_cards()
    [run] = fake.runs.values()
    parts = [p["data"] for _, p in run.log if p["type"] == "message"]
    running, done, update = [p["data"] for p in parts if p["type"] == "component"]
    assert (running["status"], done["status"]) == ("running", "success")
    assert update["category"] == "Computer" and "status" not in update
    assert card["card"]["tools"] == [{"title": "Web Search", "status": "done", "detail": ""}]


async def test_an_append_variable_grown_on_our_side_sends_only_the_added_items(
    xpert: tuple[FakeXpertAI, str],
    make_gateway: Callable[..., Any],
    prefix: str,
    redis_client: Any,
) -> None:
    fake, url = xpert
    variables = [{"name": "notes", "type": "array", "reducer": "append", "default": ["seed"]}]
    console = await make_gateway(config(prefix, url, variables=variables))
    await console.send("note it [set notes=x]")
    await console.wait_cards()
    [thread] = fake.threads.values()
    assert thread.values["notes"] == ["seed", "x"]  # our default, then the agent's write
    # our side appends (as another expert's write or a command would, through the same store)
    records = SessionRecords(client=redis_client, keys=KeyBuilder(prefix=prefix))
    sid = await _session_id(console)
    await records.apply_variables("console", "dm-alice", sid, [("notes", "append", ["y"])])
    await console.send("anything else?")
    await console.wait_cards(count=2)
    assert fake.requests[1]["input"]["state"] == {"notes": ["y"]}  # only what was added
    assert thread.values["notes"] == ["seed", "x", "y"]  # XpertAI's append reducer added it


async def test_a_variable_change_the_server_never_received_is_sent_again(
    xpert: tuple[FakeXpertAI, str],
    make_gateway: Callable[..., Any],
    prefix: str,
    redis_client: Any,
) -> None:
    fake, url = xpert
    variables = [{"name": "topic", "type": "string", "default": "general"}]
    console = await make_gateway(config(prefix, url, variables=variables))
    await console.send("hello")
    await console.wait_cards()
    sid = await _session_id(console)
    records = SessionRecords(client=redis_client, keys=KeyBuilder(prefix=prefix))
    await records.apply_variables("console", "dm-alice", sid, [("topic", "replace", "refunds")])
    fake.assistants.discard("sales")  # the next run is refused as it starts (an error frame)
    await console.send("switch topics")
    await console.wait_cards(count=2, status=None)
    [thread] = fake.threads.values()
    assert thread.values["topic"] == "general"  # the change never reached the thread
    fake.assistants.add("sales")
    await console.send("and now?")
    await console.wait_cards(count=3, status=None)
    await eventually(lambda: len(fake.requests) == 2)  # the refused run left no body
    assert fake.requests[-1]["input"]["message"]["input"]["input"] == "and now?"
    assert fake.requests[-1]["input"]["state"] == {"topic": "refunds"}


async def _session_id(console: ConsoleClient) -> str:
    sessions = await console.http.get(
        console.base + "/v1.0/sessions",
        params={"integrationId": "console", "chatId": "dm-alice"},
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    return str((await sessions.json())["result"][0]["sessionId"])
