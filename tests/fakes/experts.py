"""Fake expert backends on 127.0.0.1: the XpertAI Agent-Protocol API (threads, runs/stream SSE
with ids, resume by Last-Event-ID, cancel) and an OpenAI-compatible /chat/completions stream.
Both record what they receive and can inject errors."""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

XPERT_KEY = "sk-x-test"
OPENAI_KEY = "sk-openai-test"


def _frame(event_id: int, payload: dict[str, Any]) -> bytes:
    return f"id: {event_id}\ndata: {json.dumps(payload)}\n\n".encode()


@dataclass
class FakeXpert:
    """Scripts chosen by markers in the input: [interrupt], [drop], [silent], [slow]."""

    assistants: set[str] = field(default_factory=lambda: {"sales"})
    threads: list[str] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    resumes: list[dict[str, str]] = field(default_factory=list)
    cancels: list[str] = field(default_factory=list)
    steers: list[tuple[str, str]] = field(default_factory=list)
    _pending: dict[str, list[str]] = field(default_factory=dict)
    headers: list[dict[str, str]] = field(default_factory=list)
    _frames: dict[str, list[bytes]] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/api/ai/threads", self.create_thread)
        app.router.add_post("/api/ai/threads/{tid}/runs/stream", self.run_stream)
        app.router.add_get("/api/ai/threads/{tid}/runs/{rid}/stream", self.resume_stream)
        app.router.add_post("/api/ai/threads/{tid}/runs/{rid}/cancel", self.cancel)
        app.router.add_post("/api/ai/threads/{tid}/runs", self.follow_up)
        return app

    def _authorised(self, request: web.Request) -> bool:
        self.headers.append(dict(request.headers))
        return request.headers.get("x-api-key") == XPERT_KEY

    async def create_thread(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return web.json_response({"message": "Unauthorized"}, status=401)
        tid = f"th-{next(self._ids)}"
        self.threads.append(tid)
        return web.json_response({"thread_id": tid, "metadata": (await request.json())["metadata"]})

    def _script(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        data = body["input"]
        if data["action"] == "resume":
            decision = data["decision"]["type"]
            return [
                {"type": "message", "data": f"Resumed: {decision}"},
                {"type": "event", "event": "on_conversation_end", "data": {"status": "success"}},
            ]
        text = data["message"]["input"]["input"]
        if "[interrupt]" in text:
            return [
                {
                    "type": "event",
                    "event": "on_chat_event",
                    "data": {"id": "plan", "title": "Planning", "status": "success"},
                },
                {
                    "type": "event",
                    "event": "on_interrupt",
                    "data": {"message": "Send the email to the whole team?"},
                },
                {
                    "type": "event",
                    "event": "on_conversation_end",
                    "data": {"status": "interrupted", "operation": {"message": "Send it?"}},
                },
            ]
        frames: list[dict[str, Any]] = [
            {"type": "event", "event": "on_conversation_start", "data": {"id": "conv-1"}},
            {
                "type": "event",
                "event": "on_chat_event",
                "data": {"id": "search", "title": "Searching the wiki", "status": "running"},
            },
            {
                "type": "event",
                "event": "on_tool_start",
                "data": {"id": "t1", "name": "wiki_search"},
            },
            {"type": "event", "event": "on_tool_end", "data": {"id": "t1", "name": "wiki_search"}},
            {
                "type": "event",
                "event": "on_chat_event",
                "data": {"id": "search", "title": "Searching the wiki", "status": "success"},
            },
            {"type": "message", "data": {"type": "reasoning", "text": "hidden thoughts"}},
        ]
        frames += [{"type": "message", "data": part} for part in ("Hello ", "from ", "xpert")]
        frames.append({"type": "message", "data": {"type": "text", "text": f" [{text}]"}})
        frames.append(
            {"type": "event", "event": "on_conversation_end", "data": {"status": "success"}}
        )
        return frames

    async def run_stream(self, request: web.Request) -> web.StreamResponse:
        if not self._authorised(request):
            return web.json_response({"message": "Unauthorized"}, status=401)
        tid = request.match_info["tid"]
        body = await request.json()
        if body.get("assistant_id") not in self.assistants:
            return web.json_response({"message": "Xpert not found"}, status=404)
        rid = f"run-{next(self._ids)}"
        self.runs.append({"thread": tid, "run": rid, **body})
        if body["input"]["action"] == "resume":
            self.resumes.append({"thread": tid, "decision": body["input"]["decision"]["type"]})
        frames = [_frame(i + 1, f) for i, f in enumerate(self._script(body))]
        frames.append(b"event: complete\ndata: {}\n\n")
        self._frames[rid] = frames
        text = json.dumps(body["input"])
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Content-Location": f"/threads/{tid}/runs/{rid}",
            }
        )
        await response.prepare(request)
        for i, frame in enumerate(frames):
            if "[drop]" in text and i == 3:
                assert request.transport is not None
                request.transport.close()  # the stream breaks off mid-run
                return response
            if "[silent]" in text and i == 1:
                await asyncio.sleep(3)
            if "[slow]" in text:
                await asyncio.sleep(0.3)
            for steered in self._pending.pop(tid, []):
                payload = {"type": "message", "data": f" (steer: {steered})"}
                await response.write(f"data: {json.dumps(payload)}\n\n".encode())
            await response.write(frame)
        return response

    async def resume_stream(self, request: web.Request) -> web.StreamResponse:
        frames = self._frames.get(request.match_info["rid"])
        if frames is None:
            return web.json_response({"message": "no such run"}, status=404)
        after = int(request.headers.get("Last-Event-ID", "0"))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for frame in frames[after:]:
            await response.write(frame)
        return response

    async def follow_up(self, request: web.Request) -> web.Response:
        """A background run; a follow_up/steer is fed into the thread's running stream."""
        if not self._authorised(request):
            return web.json_response({"message": "Unauthorized"}, status=401)
        body = await request.json()
        data = body["input"]
        if data.get("action") != "follow_up" or data.get("mode") != "steer":
            return web.json_response({"message": "unsupported"}, status=400)
        tid = request.match_info["tid"]
        text = data["message"]["input"]["input"]
        self.steers.append((tid, text))
        self._pending.setdefault(tid, []).append(text)
        return web.json_response({"run_id": f"run-{next(self._ids)}", "status": "pending"})

    async def cancel(self, request: web.Request) -> web.Response:
        self.cancels.append(request.match_info["rid"])
        return web.json_response({"status": "cancelled"})


@dataclass
class FakeOpenAI:
    """Answers "Echo: <last user message>" in small chunks; ``fail_with`` statuses come first."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    fail_with: list[int] = field(default_factory=list)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.completions)
        return app

    async def completions(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {OPENAI_KEY}":
            return web.json_response({"error": {"message": "Incorrect API key"}}, status=401)
        body = await request.json()
        self.requests.append(body)
        if self.fail_with:
            status = self.fail_with.pop(0)
            return web.json_response(
                {"error": {"message": "try later"}}, status=status, headers={"Retry-After": "0"}
            )
        if body["model"] == "missing":
            return web.json_response({"error": {"message": "model not found"}}, status=404)
        content = body["messages"][-1]["content"]
        if isinstance(content, list):  # vision: text and image parts
            content = " ".join(p["text"] for p in content if p.get("type") == "text")
        answer = "Echo: " + content
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for i in range(0, len(answer), 5):
            chunk = {"choices": [{"index": 0, "delta": {"content": answer[i : i + 5]}}]}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        usage = {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 7}}
        await response.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        return response
