"""The fake XpertAI answers as the real one does where an earlier fake did not (tests/fakes/
xpertai.py names each source): the thread state's messages as ``instanceToPlain`` leaves them,
a second model step after a clarification, the access check's 403, the 50 MB JSON limit, audio
and video files that fail a run, a project bound to the thread, parses that end ``failed`` or
``partial``, and the citation tool's pretty-printed JSON."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.experts.test_xpertai_fake import Client, names, payloads, send
from tests.fakes.xpertai import API_KEY, FakeXpertAI
from tests.fakes.xpertai_agent import RESTATED

Api = tuple[FakeXpertAI, Client]


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    from tests.support.helpers import serve

    fake = FakeXpertAI(keepalive_s=0.2)
    async for url in serve(fake.app()):
        async with aiohttp.ClientSession(headers={"x-api-key": API_KEY}) as http:
            yield fake, Client(http, url + "/api/ai")


async def state(c: Client, tid: str) -> dict[str, Any]:
    async with c.http.get(f"{c.url}/threads/{tid}/state") as resp:
        assert resp.status == 200
        body: dict[str, Any] = await resp.json()
        return body


def texts(body: bytes) -> str:
    return "".join(
        p["data"]["text"]
        for p in payloads(body)
        if p["type"] == "message" and isinstance(p["data"], dict) and p["data"]["type"] == "text"
    )


async def test_state_messages_are_their_fields_and_the_model_runs_after_a_question(
    api: Api,
) -> None:
    fake, c = api
    tid = await c.thread()
    status, body = await c.stream(tid, send("[clarify] report"))
    assert status == 201 and texts(body) == RESTATED  # goto 'end' names no node: a 2nd step
    messages = (await state(c, tid))["values"]["messages"]
    for message in messages:
        assert "type" not in message and "role" not in message and "kwargs" not in message
        assert message["lc_serializable"] is True and isinstance(message["lc_kwargs"], dict)
    human, call, tool, restated = messages
    assert "tool_calls" not in human and "tool_call_id" not in human
    assert call["tool_calls"][0]["name"] == "ask_clarification"
    assert tool["tool_call_id"] == "call_ask" and tool["name"] == "ask_clarification"
    assert tool["metadata"]["clarification"]["options"] == ["China", "Europe", "Americas"]
    assert restated["content"] == RESTATED and restated["tool_calls"] == []
    # An agent that lists the tool in its endNodes ends at the question.
    fake.end_nodes = {"ask_clarification"}
    tid = await c.thread()
    _, body = await c.stream(tid, send("[clarify] report"))
    assert texts(body) == "" and "on_conversation_end" in names(body)
    assert len((await state(c, tid))["values"]["messages"]) == 3


async def test_a_user_without_access_is_refused_with_403(api: Api) -> None:
    fake, c = api
    fake.no_access = {"u-7"}
    as_bob = {"x-principal-user-id": "u-7"}
    status, body = await c.post("/threads", {"assistant_id": "sales"}, headers=as_bob)
    refused = {"message": "You do not have access to this assistant."}
    assert (status, json.loads(body)) == (403, {**refused, "error": "Forbidden", "statusCode": 403})
    status, _ = await c.post("/threads", {}, headers=as_bob)
    assert status == 201  # no assistant named: no access check
    tid = await c.thread()
    payload = {"assistant_id": "sales", "input": send("hi")}
    status, body = await c.post(f"/threads/{tid}/runs/stream", payload, as_bob)
    assert status == 201 and b"event: error\nid: 1\ndata: You do not have access" in body
    status, body = await c.post(f"/threads/{tid}/runs", payload, as_bob)
    assert (status, json.loads(body)["message"]) == (403, refused["message"])


async def test_a_json_body_over_50_mib_is_refused_with_413(api: Api) -> None:
    fake, c = api
    tid = await c.thread()
    picture = {"fileUrl": "data:image/png;base64," + "A" * (50 * 1024 * 1024), "name": "p.png"}
    data = send("big")
    data["message"]["input"]["files"] = [picture]
    raw = json.dumps({"assistant_id": "sales", "input": data}).encode()
    headers = {"Content-Type": "application/json", "Content-Length": str(len(raw))}
    url = f"{c.url}/threads/{tid}/runs/stream"
    async with c.http.post(url, data=io.BytesIO(raw), headers=headers) as resp:
        status, body = resp.status, await resp.read()
    assert status == 413 and b"request entity too large" in body
    assert fake.requests == []  # refused before the run


def with_file(text: str, mime: str, **extra: Any) -> dict[str, Any]:
    data = send(text)
    url = f"data:{mime};base64," + base64.b64encode(b"\x00" * 64).decode()
    data["message"]["input"]["files"] = [{"fileUrl": url, "mimeType": mime, **extra}]
    return data


@pytest.mark.parametrize(
    ("mime", "error"),
    [
        ("audio/mpeg", "Audio files are not supported yet"),
        ("video/mp4", "Video file path is required"),
    ],
)
async def test_audio_and_video_fail_the_whole_run(api: Api, mime: str, error: str) -> None:
    _, c = api
    tid = await c.thread()
    _, body = await c.stream(tid, with_file("hear this", mime, name="memo"))
    [end] = [p["data"] for p in payloads(body) if p.get("event") == "on_conversation_end"]
    assert end["status"] == "error" and end["error"] == error
    _, body = await c.stream(tid, with_file("look", "image/png"))
    assert "Hello from xpert [look]" in texts(body)  # a picture is fine


async def test_a_project_binds_the_thread_once(api: Api) -> None:
    fake, c = api
    tid = await c.thread()
    _, body = await c.stream(tid, send("hi", projectId="p-1"))
    assert fake.threads[tid].project == "p-1" and "on_conversation_end" in names(body)
    _, body = await c.stream(tid, send("again", projectId="p-2"))
    assert b"The route Project does not match the conversation Project" in body
    _, body = await c.stream(tid, send("no project"))
    assert "on_conversation_end" in names(body)  # the thread keeps its project


@pytest.mark.parametrize(
    ("outcome", "error"), [("failed", "Unsupported PDF structure"), ("partial", None)]
)
async def test_a_parse_ends_failed_or_partial(api: Api, outcome: str, error: str | None) -> None:
    fake, c = api
    fake.files.parse_outcome = (outcome, error)
    form = aiohttp.FormData()
    form.add_field("file", b"%PDF-1.4 small", filename="a.pdf", content_type="application/pdf")
    async with c.http.post(c.url + "/contexts/file", data=form) as resp:
        assert resp.status == 201
        agent_file = await resp.json()
    assert agent_file["status"] == outcome  # parsed inline (under 2 MB)
    fake.files.parse_reads = 1
    form = aiohttp.FormData()
    big = b"%PDF-1.4 " + b"x" * 2_100_000
    form.add_field("file", io.BytesIO(big), filename="b.pdf", content_type="application/pdf")
    async with c.http.post(c.url + "/contexts/file", data=form) as resp:
        queued = await resp.json()
    assert queued["status"] == "parsing"
    async with c.http.get(f"{c.url}/files/{queued['fileId']}/status") as resp:
        body = await resp.json()
    assert (body["status"], body["error"]) == (outcome, error)
    assert ("parsedAt" in body) == (outcome != "failed")


async def test_the_citation_tools_json_is_pretty_printed(api: Api) -> None:
    _, c = api
    tid = await c.thread()
    _, body = await c.stream(tid, send("[kb] refunds"))
    [output] = [
        p["data"]["data"]["output"]
        for p in payloads(body)
        if p["type"] == "message"
        and isinstance(p["data"], dict)
        and p["data"]["type"] == "component"
        and "output" in p["data"]["data"]
    ]
    assert output.startswith('{\n  "chunks": [\n    {\n')  # JSON.stringify(…, null, 2)
    assert json.loads(output)["citations"][0]["index"] == 1


async def test_the_next_releases_tool_component_has_a_string_title_and_an_svg_icon(
    api: Api,
) -> None:
    _, c = api
    tid = await c.thread()
    _, body = await c.stream(tid, send("[icon] weather"))
    [start] = [
        p["data"]["data"]
        for p in payloads(body)
        if p["type"] == "message"
        and isinstance(p["data"], dict)
        and p["data"]["type"] == "component"
        and p["data"]["data"].get("status") == "running"
    ]
    assert start["title"] == "Search the wiki" and start["icon"]["value"].startswith("<svg")
