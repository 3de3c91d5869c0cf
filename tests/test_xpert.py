"""The xpert backend end to end against a fake XpertAI that behaves as the real server does
(tests/fakes/xpertai.py): console -> daemon -> fake XpertAI -> card."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest

from tests.conftest import base_config, eventually
from tests.fakes.xpertai import API_KEY, FakeXpertAI
from tests.helpers import ConsoleClient
from tests.test_admin_memory import TOKEN, admin
from tests.test_experts import serve


@pytest.fixture
async def xpert() -> AsyncIterator[tuple[FakeXpertAI, str]]:
    fake = FakeXpertAI(keepalive_s=0.2)
    async for url in serve(fake.app()):
        yield fake, url + "/api/ai"


def config(
    prefix: str, url: str, expert: dict[str, Any] | None = None, **integ: Any
) -> dict[str, Any]:
    cfg = base_config(prefix, xpertId="sales", **integ)
    cfg["experts"] = [
        {
            "id": "sales",
            "kind": "xpert",
            "baseUrl": url,
            "apiKey": API_KEY,
            "organizationId": "org-1",
            "principalUserId": "u-42",
            "connectRetries": 2,
            **(expert or {}),
        }
    ]
    cfg["admin"] = {"token": TOKEN}
    return cfg


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
    ("decision", "answer", "tools"),
    [
        (
            "confirm",
            "Email sent to the team.",
            [{"title": "Send email", "status": "done", "detail": ""}],
        ),
        ("reject", "Not sent: you rejected it.", []),
    ],
)
async def test_an_interrupt_waits_and_the_decision_resumes_that_run(
    xpert: tuple[FakeXpertAI, str],
    make_gateway: Callable[..., Any],
    prefix: str,
    decision: str,
    answer: str,
    tools: list[dict[str, str]],
) -> None:
    fake, url = xpert
    console = await make_gateway(config(prefix, url))
    await console.send("mail the report [interrupt]")
    [card] = await console.wait_cards(status="waiting")
    assert card["card"]["title"] == "Send email: Send the report to the whole team?"
    [run] = fake.runs.values()
    assert run.status == "interrupted"
    await console.click("dm-alice", card["id"], decision)
    [card] = await console.wait_cards(status="done")
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


async def test_a_steered_message_reaches_the_running_execution(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = xpert
    console = await make_gateway(config(prefix, url, busyPolicy="steer"))
    await console.send("write the plan [slow]")
    await console.wait_cards(status="running")
    await eventually(lambda: [r for r in fake.runs.values() if r.log])
    await console.send("add the budget")
    [card] = await console.wait_cards()
    [run] = fake.runs.values()
    [steer] = fake.steers
    assert steer["mode"] == "steer" and steer["target"]["executionId"] == run.id
    assert steer["message"]["input"] == {"input": "add the budget"}
    assert "(steer: add the budget)" in card["card"]["answer"]
    assert len(fake.runs) == 1  # no second run


async def test_a_picture_reaches_the_agent_as_an_inline_file(
    xpert: tuple[FakeXpertAI, str], prefix: str, redis_client: Any
) -> None:
    from tests.dingtalk_support import robot_message, running
    from tests.fakes.dingtalk import PNG

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


async def test_a_steer_the_run_ends_before_taking_is_answered_in_the_same_card(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = xpert
    console = await make_gateway(config(prefix, url, busyPolicy="steer"))
    await console.send("plan [late]")
    await eventually(
        lambda: any(
            p["data"] == " [plan [late]]"
            for r in fake.runs.values()
            for _, p in r.log
            if p.get("type") == "message"
        )
    )
    await console.send("add the budget")  # the run is past its last step
    [card] = await console.wait_cards()
    [steer] = fake.steers
    client_id = steer["message"]["clientMessageId"]
    # the queued follow-up was run by a send carrying its clientMessageId
    assert fake.requests[-1]["input"]["message"]["clientMessageId"] == client_id
    assert card["card"]["answer"] == (
        "Hello from xpert [plan [late]]\n\nHello from xpert [add the budget]"
    )
    assert not fake.threads[fake.requests[0]["thread"]].queued


# --- the fake's refusals are the real server's --------------------------------------------
async def _post(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    async with http.post(url, json=body) as resp:
        return resp.status, await resp.read()


async def test_the_fake_refuses_what_the_real_server_refuses(
    xpert: tuple[FakeXpertAI, str],
) -> None:
    fake, url = xpert
    async with aiohttp.ClientSession(headers={"x-api-key": API_KEY}) as http:
        status, body = await _post(http, f"{url}/threads", {"assistant_id": "sales"})
        assert status == 201
        tid = json.loads(body)["thread_id"]
        async with http.get(f"{url}/threads/{tid}/state") as resp:
            assert resp.status == 500  # no checkpoint before the first run
        stream = f"{url}/threads/{tid}/runs/stream"
        # errors while a run starts: a 201 stream with Nest's "event: error" frame, no complete
        resume = {"action": "resume", "decision": {"type": "confirm"}}
        status, body = await _post(http, stream, {"assistant_id": "sales", "input": resume})
        assert (status, body) == (201, b"\nevent: error\nid: 1\ndata: target: Required\n\n")
        send = {"action": "send", "message": {"input": {"input": "hi [interrupt]"}}}
        status, body = await _post(http, stream, {"assistant_id": "sales", "input": send})
        assert status == 201 and body.endswith(b'data: {"type": "complete"}\n\n')
        [run] = fake.runs.values()
        # a resume without Last-Event-ID first replays the interrupted run, down to its complete
        resume = {**resume, "target": {"executionId": run.id}}
        status, body = await _post(http, stream, {"assistant_id": "sales", "input": resume})
        assert b"on_interrupt" in body and body.count(b"event: complete") == 1
        await eventually(lambda: run.status == "success")
        steer = {
            "action": "follow_up",
            "mode": "steer",
            "target": {"executionId": run.id},
            "message": {"input": {"input": "late"}},
        }
        status, body = await _post(
            http, f"{url}/threads/{tid}/runs", {"assistant_id": "sales", "input": steer}
        )
        assert status == 400 and json.loads(body)["code"] == "steer_target_not_running"
        bad = {
            "action": "send",
            "message": {"input": {"input": "x", "files": [{"fileUrl": "data:image/png,raw"}]}},
        }
        status, body = await _post(http, stream, {"assistant_id": "sales", "input": bad})
        assert body.endswith(b"data: Invalid chat request file data URL\n\n")
    async with aiohttp.ClientSession() as http:
        status, _ = await _post(http, f"{url}/threads", {})
        assert status == 401


async def test_sys_comes_from_the_principal_user_and_the_gateway_cannot_set_it(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    """What the README says about sys.* for xpert: XpertAI fills it from the principal user
    (x-principal-user-id) and ignores what a client sends as sys.*."""
    fake, url = xpert
    console = await make_gateway(config(prefix, url, language="fr-FR", timezone="Europe/Paris"))
    await console.send("bonjour")
    await console.wait_cards()
    [thread] = fake.threads.values()
    assert thread.values["sys"]["language"] == "zh-Hans"  # u-42's profile, not the integration's
    assert thread.values["sys"]["user_email"] == "alice@example.com"
    assert "sys" not in fake.requests[0]["input"]["state"]
