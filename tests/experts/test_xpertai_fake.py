"""The fake XpertAI server answers as the real one does (tests/fakes/xpertai.py names the source of
each behaviour): its refusals, its stream framing and replay, and how a run takes follow-ups."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.fakes.xpertai import API_KEY, FakeXpertAI
from tests.fakes.xpertai_agent import Stream, parse_stream_id
from tests.fakes.xpertai_input import HttpError, node_b64decode, reduce_variable
from tests.support.helpers import serve
from tests.support.waits import eventually
from tests.support.xpertai_client import Client, frames, names, names_of, payloads, send

Api = tuple[FakeXpertAI, Client]


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    fake = FakeXpertAI(keepalive_s=0.2)
    async for url in serve(fake.app()):
        async with aiohttp.ClientSession(headers={"x-api-key": API_KEY}) as http:
            yield fake, Client(http, url + "/api/ai")


def consumed_events(body: bytes) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = [
        p["data"] for p in payloads(body) if p.get("event") == "on_chat_event"
    ]
    return [d for d in found if d.get("type") == "follow_up_consumed"]


def follow_up(mode: str, text: str, client_id: str, run: str | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "action": "follow_up",
        "mode": mode,
        "message": {"clientMessageId": client_id, "input": {"input": text}},
    }
    if run:
        data["target"] = {"executionId": run}
    return data


# --- starting a run: the order of the refusals ----------------------------------------------
async def test_an_unknown_thread_fails_on_the_null_conversation_after_zod(api: Api) -> None:
    """F1, F9: assistant first (404), then zod (400), then ``conversation.id`` of null (a
    TypeError: 500 on POST /runs, its message in runs/stream's error frame)."""
    _, c = api
    good = send("hi")
    status, body = await c.post("/threads/nope/runs", {"assistant_id": "sales", "input": good})
    assert (status, json.loads(body)) == (
        500,
        {"statusCode": 500, "message": "Internal server error"},
    )
    status, body = await c.stream("nope", good)
    assert (status, body) == (
        201,
        b"\nevent: error\nid: 1\ndata: Cannot read properties of null (reading 'id')\n\n",
    )
    status, body = await c.post("/threads/nope/runs", {"assistant_id": "sales", "input": {}})
    assert (status, json.loads(body)) == (
        400,
        {"message": "message: Required", "error": "Bad Request", "statusCode": 400},
    )
    status, body = await c.post("/threads/nope/runs", {"assistant_id": "x", "input": {}})
    assert status == 404 and json.loads(body)["message"] == "The requested record was not found"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"action": "resume", "decision": {"type": "confirm"}}, "target: Required"),
        (
            {"action": "resume", "target": {}, "decision": {"type": "ok"}},
            "decision.type: Invalid input",
        ),
        ({"action": "follow_up", "mode": "later", "message": {"input": {}}}, "mode: Invalid input"),
        (
            {"action": "send", "message": {"input": "hi"}},
            "message.input: Expected object, received string",
        ),
        (
            {"action": "follow_up", "mode": "steer", "message": {"input": {}}, "target": "x"},
            "target: Expected object, received string",
        ),
        ({"input": "hi", "files": []}, "message.input: Expected object, received string"),  # legacy
        ("hi", ": Expected object, received string"),
        (None, ": Expected object, received null"),
        ({"action": "resume"}, "target: Required; decision: Required"),
        (
            {"action": "nope"},
            "action: Invalid discriminator value. "
            "Expected 'send' | 'resume' | 'retry' | 'follow_up'",
        ),
    ],
)
async def test_a_refused_input_gets_zods_own_message(api: Api, data: Any, message: str) -> None:
    """F8: zod 3.25.67's texts (checked by running that zod on the server's schema)."""
    _, c = api
    tid = await c.thread()
    status, body = await c.stream(tid, data)
    assert (status, body) == (201, f"\nevent: error\nid: 1\ndata: {message}\n\n".encode())
    status, body = await c.post(f"/threads/{tid}/runs", {"assistant_id": "sales", "input": data})
    assert status == 400 and json.loads(body)["message"] == message


async def test_auth_and_threads_refuse_as_the_server_does(api: Api) -> None:
    fake, c = api
    async with aiohttp.ClientSession() as anonymous:
        async with anonymous.post(c.url + "/threads", json={}) as resp:
            assert resp.status == 401
    status, body = await c.post("/threads", {}, headers={"x-principal-user-id": "nobody"})
    assert (status, json.loads(body)) == (401, {"message": "Unauthorized", "statusCode": 401})
    status, body = await c.post(
        "/threads", {"assistant_id": "sales", "metadata": {"title": "t", "x": 1}}
    )
    dto = json.loads(body)
    thread = fake.threads[dto["thread_id"]]
    # the conversation id is not the thread id; of metadata only the title is kept
    assert dto["metadata"] == {"id": thread.conversation, "title": "t", "assistant_id": "sales"}
    assert thread.conversation != thread.id
    status, body = await c.post("/threads", {"thread_id": thread.id, "if_exists": "raise"})
    assert (status, json.loads(body)["message"]) == (400, "The thread already exists.")
    async with c.http.get(f"{c.url}/threads/{thread.id}/state") as resp:
        assert resp.status == 500  # no checkpoint before the first run


# --- frames ---------------------------------------------------------------------------------
async def test_a_run_streams_the_servers_frames_in_its_order(api: Api) -> None:
    """F14, F15: JSON.stringify without spaces; on_agent_start after on_message_start; text as
    ``{type:'text'}`` chunks of one stream per model call, never bare strings; the conversation
    id, not the thread id, in on_conversation_start."""
    fake, c = api
    tid = await c.thread()
    status, body = await c.stream(tid, send("hi"))
    assert status == 201 and body.startswith(b"\nid: ")
    assert body.endswith(
        b"event: complete\nid: "
        + frames(body)[-1]["id"].encode()
        + b'\ndata: {"type":"complete"}\n\n'
    )
    assert b'": ' not in body and b'", "' not in body
    order = names(body)
    assert order[:3] == ["on_conversation_start", "on_message_start", "on_agent_start"]
    assert order[-4:] == ["on_agent_end", "on_message_end", "on_conversation_end", "complete"]
    assert "str" not in order
    sent = payloads(body)
    assert sent[0]["data"]["id"] == fake.threads[tid].conversation != tid
    texts = [p["data"] for p in sent if p["type"] == "message" and p["data"]["type"] == "text"]
    assert (
        len({t["id"] for t in texts}) == 1
        and "".join(t["text"] for t in texts) == "Hello from xpert [hi]"
    )
    status, body = await c.stream(tid, send("[memory] hi"))
    assert names(body) == [
        "on_conversation_start",
        "on_message_start",
        "str",
        "on_message_end",
        "on_conversation_end",
        "complete",
    ]


async def test_last_event_id_is_an_ordered_exclusive_start(api: Api) -> None:
    """F7: XRANGE ``(<id>``: entries strictly after the id, compared as numbers, whether or not
    the id is in the stream; a malformed id is Redis' error as an ``event: error`` frame."""
    fake, c = api
    tid = await c.thread()
    await c.stream(tid, send("hi"))
    [run] = fake.runs.values()
    ids = [sid for sid, _ in run.log]
    assert [f["id"] for f in frames(await c.join(tid, run.id))] == ids  # no header: from 0-0
    assert [f["id"] for f in frames(await c.join(tid, run.id, ids[2]))] == ids[3:]
    parsed = [tuple(map(int, sid.split("-"))) for sid in ids]
    k = next(i for i in range(len(ids) - 1) if parsed[i + 1][0] > parsed[i][0])
    between = f"{parsed[k][0]}-{parsed[k][1] + 10**9}"  # in no entry, after entry k
    assert [f["id"] for f in frames(await c.join(tid, run.id, between))] == ids[k + 1 :]
    body = await c.join(tid, run.id, "abc")
    error = "ERR Invalid stream ID specified as stream command argument"
    assert body == f"\nevent: error\nid: 1\ndata: {error}\n\n".encode()
    stream = Stream(log=[("5-0", {}), ("5-1", {}), ("7-0", {})])
    assert [stream.start(parse_stream_id(i)) for i in ("5", "5-0", "6-9", " 5-1 ", "")] == [
        1,
        1,
        2,
        2,
        0,
    ]
    assert stream.start(parse_stream_id("$")) == 3


# --- follow-ups -------------------------------------------------------------------------------
async def _steered_run(
    fake: FakeXpertAI, c: Client, tid: str, *follow_ups: dict[str, Any]
) -> tuple[str, bytes]:
    status, run = await c.run(tid, send("plan [hold]"))
    assert status == 201
    await eventually(lambda: "component" in names_of(fake.runs[run["run_id"]].log))
    for data in follow_ups:
        status, body = await c.run(tid, {**data, "target": {"executionId": run["run_id"]}})
        assert status == 201, body
    fake.release()
    return run["run_id"], await c.join(tid, run["run_id"])


async def test_a_step_takes_one_steer_and_the_run_end_queues_the_rest(api: Api) -> None:
    """F2, F5: one pending steer per model step (queue ones never); the AI message ends before
    ``follow_up_consumed`` (with visibleAt) and the new one starts lazily, before the next
    message; what is left becomes a queued follow-up at the end."""
    fake, c = api
    tid = await c.thread()
    run, body = await _steered_run(
        fake,
        c,
        tid,
        follow_up("steer", "add the budget", "s1"),
        follow_up("steer", "and the risks", "s2"),
        follow_up("queue", "later please", "q1"),
    )
    order = names(body)
    at = order.index("on_chat_event", order.index("component") + 1)
    assert order[at - 1 : at + 3] == [
        "on_message_end",
        "on_chat_event",
        "on_message_start",
        "reasoning",
    ]
    sent = payloads(body)
    consumed = consumed_events(body)
    assert len(consumed) == 1
    assert consumed[0]["clientMessageIds"] == ["s1"] and consumed[0]["mode"] == "steer"
    assert consumed[0]["executionId"] == run and consumed[0]["visibleAt"].endswith("Z")
    first, second = [p["data"] for p in sent if p.get("event") == "on_message_start"]
    assert first["id"] != second["id"] and second["executionId"] == run
    assert second["parentId"] == consumed[0]["messageIds"][0]
    texts = "".join(
        p["data"]["text"] for p in sent if p["type"] == "message" and p["data"]["type"] == "text"
    )
    assert texts.endswith("(steer: add the budget)")
    left = fake.threads[tid].pending()
    assert [(m["clientMessageId"], m["followUpMode"]) for m in left] == [
        ("s2", "queue"),
        ("q1", "queue"),
    ]


async def test_a_send_runs_the_matching_follow_up_with_its_stored_input(api: Api) -> None:
    """F4: a pending follow-up of any mode with the send's clientMessageId (one only; a
    follow-up sent again with the same id replaced it) runs with its stored input, the send's
    own ignored; the stream says so with ``follow_up_consumed`` (mode queue) first."""
    fake, c = api
    tid = await c.thread()
    run, _ = await _steered_run(
        fake,
        c,
        tid,
        follow_up("steer", "first", "s1"),
        follow_up("steer", "second", "s2"),
        follow_up("queue", "third", "q1"),
        follow_up("steer", "second, revised", "s2"),
    )
    _, body = await c.stream(tid, send("ignored", "s2"))
    assert names(body)[:3] == ["on_conversation_start", "on_chat_event", "on_message_start"]
    [consumed] = consumed_events(body)
    assert consumed["mode"] == "queue" and consumed["clientMessageIds"] == ["s2"]
    assert consumed["executionId"] == run
    text = "".join(
        p["data"]["text"]
        for p in payloads(body)
        if p["type"] == "message" and p["data"]["type"] == "text"
    )
    assert text == "Hello from xpert [second, revised]"
    assert [m["clientMessageId"] for m in fake.threads[tid].pending()] == ["q1"]


async def test_follow_up_on_runs_stream_is_the_direct_transport(api: Api) -> None:
    """F6: ``EMPTY`` through Nest's ``sse()``: a 201 with the blank line, then the end."""
    fake, c = api
    tid = await c.thread()
    status, run = await c.run(tid, send("plan [hold]"))
    status, body = await c.stream(tid, follow_up("steer", "more", "s1", run["run_id"]))
    assert (status, body) == (201, b"\n")
    fake.release()
    await eventually(lambda: fake.runs[run["run_id"]].status == "success")
    status, body = await c.stream(tid, follow_up("steer", "late", "s2", run["run_id"]))
    assert (
        body
        == b"\nevent: error\nid: 1\ndata: Steer follow-up target execution is no longer running\n\n"
    )
    status, body = await c.post(
        f"/threads/{tid}/runs",
        {"assistant_id": "sales", "input": follow_up("steer", "late", "s2", run["run_id"])},
    )
    assert (status, json.loads(body)) == (
        400,
        {
            "code": "steer_target_not_running",
            "message": "Steer follow-up target execution is no longer running",
        },
    )


async def test_a_steer_at_an_interrupt_waits_for_the_resumed_run(api: Api) -> None:
    """F3, F16: while the conversation waits on an interrupt with tasks, a steer is kept (a
    queued follow-up is refused); it stays a steer and the resumed run takes it."""
    fake, c = api
    tid = await c.thread()
    _, body = await c.stream(tid, send("mail it [interrupt]"))
    [run] = fake.runs.values()
    assert run.status == "interrupted" and fake.threads[tid].status == "interrupted"
    status, _ = await c.run(tid, follow_up("steer", "cc the boss", "s1", run.id))
    assert status == 201
    status, refused = await c.run(tid, follow_up("queue", "later", "q1", run.id))
    assert refused["message"] == "Follow-up is not available while the conversation is interrupted"
    assert [m["followUpMode"] for m in fake.threads[tid].pending()] == ["steer"]
    last = frames(body)[-1]["id"]
    resume = {
        "action": "resume",
        "target": {"executionId": run.id},
        "decision": {"type": "confirm"},
    }
    _, resumed = await c.stream(tid, resume, last)
    consumed = [p for p in consumed_events(resumed)]
    assert consumed and consumed[0]["clientMessageIds"] == ["s1"]
    assert not fake.threads[tid].pending()


async def test_resume_upserts_its_execution(api: Api) -> None:
    """F10: an unknown executionId is created, not refused; ``target:{}`` keys the stream by a
    new execution id while the frames carry the resumed one's."""
    fake, c = api
    tid = await c.thread()
    await c.stream(tid, send("mail it [interrupt]"))
    [old] = fake.runs.values()
    status, run = await c.run(
        tid, {"action": "resume", "target": {}, "decision": {"type": "reject"}}
    )
    assert status == 201 and run["run_id"] != old.id
    body = await c.join(tid, run["run_id"])
    ids = {p["data"].get("executionId") for p in payloads(body) if isinstance(p.get("data"), dict)}
    assert ids - {None} == {old.id}
    assert fake.runs[run["run_id"]].status == "running" and old.status == "success"
    unknown = {
        "action": "resume",
        "target": {"executionId": "ex-new"},
        "decision": {"type": "confirm"},
    }
    status, body = await c.stream(tid, unknown)
    assert names(body)[-1] == "complete" and fake.runs["ex-new"].status == "success"


async def test_cancel_answers_as_the_server_does(api: Api) -> None:
    fake, c = api
    tid = await c.thread()
    await c.stream(tid, send("hi"))
    [run] = fake.runs.values()
    status, body = await c.post(f"/threads/{tid}/runs/{run.id}/cancel", {})
    assert (status, json.loads(body)) == (201, {"canceledExecutionIds": [run.id]})
    assert run.status == "interrupted" and fake.threads[tid].status == "interrupted"
    status, _ = await c.post(f"/threads/{tid}/runs/nope/cancel", {})
    assert status == 404
    status, _ = await c.post(f"/threads/nope/runs/{run.id}/cancel", {})
    assert status == 404


# --- state, sys, files ------------------------------------------------------------------------
async def test_sys_is_the_acting_users_and_keeps_the_requests_own_keys(api: Api) -> None:
    """F11: the named principal (no language: 'en-US'), else the technical user ('en', no
    email); the standard keys are overwritten, a request's own sys keys are kept."""
    fake, c = api
    tid = await c.thread()
    state = {"sys": {"language": "fr", "user_email": "x@y", "user_name": "Zoe"}}
    await c.stream(tid, send("hi", state=state))
    sys = fake.threads[tid].values["sys"]
    assert sys["language"] == "en" and "user_email" not in sys and sys["user_name"] == "Zoe"
    for key in ("date", "datetime", "thread_id", "workspace_path", "common_times"):
        assert sys[key], key
    await c.post(
        f"/threads/{tid}/runs/stream",
        {"assistant_id": "sales", "input": send("again")},
        headers={"x-principal-user-id": "u-7"},
    )
    sys = fake.threads[tid].values["sys"]
    assert (sys["language"], sys["user_email"], sys["user_name"]) == (
        "en-US",
        "bob@example.com",
        "Zoe",
    )


async def test_declared_variables_go_through_their_reducer(api: Api) -> None:
    """F12 (shared/agent/state.ts stateVariable) through a run, and the reducer table."""
    fake, c = api
    tid = await c.thread()
    await c.stream(tid, send("hi", state={"notes": "a", "topic": "x", "other": 1}))
    await c.stream(tid, send("hi", state={"notes": None, "topic": None}))
    values = fake.threads[tid].values
    assert values["notes"] == ["a"] and values["topic"] == "x" and "other" not in values
    assert reduce_variable("array", "append", ["a"], ["b", "c"]) == ["a", "b", "c"]
    assert reduce_variable("array", "overwrite", ["a"], None) is None
    assert reduce_variable("number", "append", 2, "3") == 5
    assert reduce_variable("number", "append", None, "3") == 3
    assert reduce_variable("string", "append", "ab", "c") == "abc"
    assert reduce_variable("string", "extend", "ab", None) is None  # extend, clear: the new value


@pytest.mark.parametrize(
    ("url", "size", "error"),
    [
        ("data:image/png;base64,@@YWJj", 3, None),  # other characters are skipped
        ("data:image/png;base64,YW=Jj", 1, None),  # "=" ends the data
        ("data:image/png;base64,", 0, None),  # nothing to decode is no error
        ("data:image/png;base64,!!!!", 0, "Invalid chat request file data URL"),
        ("data:image/png,raw", 0, "Invalid chat request file data URL"),
    ],
)
async def test_data_urls_decode_as_nodes_buffer_does(
    api: Api, url: str, size: int, error: str | None
) -> None:
    """F13: Buffer.from(payload, 'base64') is lenient; only a payload that decodes to nothing
    is refused."""
    fake, c = api
    tid = await c.thread()
    data = send("x")
    data["message"]["input"]["files"] = [{"fileUrl": url}]
    _, body = await c.stream(tid, data)
    if error:
        assert body == f"\nevent: error\nid: 1\ndata: {error}\n\n".encode()
    else:
        assert fake.threads[tid].files == [("image/png", size)]
    assert node_b64decode("YWJjZA") == b"abcd" and node_b64decode("a-_b") == bytes([107, 239, 219])


def test_http_errors_carry_nests_bodies() -> None:
    exc = HttpError(400, "target: Required")
    assert exc.body == {"message": "target: Required", "error": "Bad Request", "statusCode": 400}
