"""A fake OpenAI-compatible ``/chat/completions`` stream on 127.0.0.1 that records what it
receives, refuses file parts that are not PDFs, and can inject errors (the XpertAI fake is
``tests/fakes/xpertai.py``). With ``media``, it also serves files under ``/files/`` on its own
origin (an agent's answer linking to them: tests/fakes/media.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.media import FakeMediaHost

OPENAI_KEY = "sk-openai-test"
MODELS = ("qwen2.5", "gpt-4o-mini")  # what GET /models lists ("missing" answers 404 when used)


@dataclass
class FakeOpenAI:
    """Answers "Echo: <last user message>" in small chunks; ``fail_with`` statuses come first."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    fail_with: list[int] = field(default_factory=list)
    media: FakeMediaHost | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.completions)
        app.router.add_get("/v1/models", self.models)
        if self.media is not None:
            app.router.add_get("/files/{tail:.*}", self.media.get)
        return app

    async def models(self, request: web.Request) -> web.Response:
        """``GET /models``: the models the key may use, as the OpenAI API's "List models"
        answers (https://platform.openai.com/docs/api-reference/models/list: ``object: list``
        and ``data`` of ``{id, object: model, created, owned_by}``); a wrong key is 401."""
        if request.headers.get("Authorization") != f"Bearer {OPENAI_KEY}":
            return web.json_response({"error": {"message": "Incorrect API key"}}, status=401)
        data = [
            {"id": name, "object": "model", "created": 1_700_000_000, "owned_by": "fake"}
            for name in MODELS
        ]
        return web.json_response({"object": "list", "data": data})

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
        if isinstance(content, list) and (refused := _bad_file(content)) is not None:
            return web.json_response({"error": {"message": refused}}, status=400)
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


def _bad_file(parts: list[dict[str, Any]]) -> str | None:
    """Chat Completions takes ``{"type": "file", "file": {"filename", "file_data"}}`` parts, the
    data base64 (a data URL), and only PDFs (developers.openai.com/api/docs/guides/file-inputs,
    "Chat Completions accepts only PDF files as file content parts"). The refusal's wording
    is the fake's own."""
    for part in parts:
        if part.get("type") != "file":
            continue
        file = part.get("file") or {}
        if not str(file.get("file_data") or "").startswith("data:application/pdf;base64,"):
            return "Invalid file data: only PDF files are supported as file content parts."
    return None
