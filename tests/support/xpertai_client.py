"""Raw HTTP against the fake XpertAI, as an Agent-Protocol client talks to XpertAI, and the
reading of its SSE streams: shared by the fake's own tests (tests/experts/test_xpertai_fake*.py)."""

from __future__ import annotations

import json
from typing import Any

import aiohttp


class Client:
    """Raw HTTP against the fake, as an Agent-Protocol client would talk to XpertAI."""

    def __init__(self, http: aiohttp.ClientSession, url: str) -> None:
        self.http, self.url = http, url

    async def thread(self, **body: Any) -> str:
        status, data = await self.post("/threads", {"assistant_id": "sales", **body})
        assert status == 201, data
        return str(json.loads(data)["thread_id"])

    async def post(
        self, path: str, body: Any, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        async with self.http.post(self.url + path, json=body, headers=headers) as resp:
            return resp.status, await resp.read()

    async def stream(
        self, tid: str, data: Any, last_id: str | None = None, **body: Any
    ) -> tuple[int, bytes]:
        """``POST …/runs/stream``: the whole 201 stream."""
        headers = {"Last-Event-ID": last_id} if last_id else None
        payload = {"assistant_id": "sales", "input": data, **body}
        return await self.post(f"/threads/{tid}/runs/stream", payload, headers)

    async def run(self, tid: str, data: Any) -> tuple[int, dict[str, Any]]:
        """``POST …/runs``: the run goes on in the background."""
        status, body = await self.post(
            f"/threads/{tid}/runs", {"assistant_id": "sales", "input": data}
        )
        return status, json.loads(body)

    async def join(self, tid: str, run: str, last_id: str | None = None) -> bytes:
        headers = {"Last-Event-ID": last_id} if last_id is not None else {}
        url = f"{self.url}/threads/{tid}/runs/{run}/stream"
        async with self.http.get(url, headers=headers) as resp:
            assert resp.status == 200
            return await resp.read()


def frames(body: bytes) -> list[dict[str, str]]:
    out = []
    for block in body.decode().split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if line and not line.startswith(":"):
                name, _, value = line.partition(": ")
                fields[name] = f"{fields[name]}\n{value}" if name in fields else value
        if fields:
            out.append(fields)
    return out


def payloads(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(f["data"]) for f in frames(body) if f.get("event") != "error"]


def names(body: bytes) -> list[str]:
    """Each frame as its event name, ``text``/``component``/``reasoning``/``str`` for messages."""
    return names_of([("", p) for p in payloads(body)])


def names_of(log: list[tuple[str, dict[str, Any]]]) -> list[str]:
    out = []
    for _, p in log:
        if p["type"] == "message":
            out.append(p["data"]["type"] if isinstance(p["data"], dict) else "str")
        else:
            out.append(p.get("event") or p["type"])
    return out


def send(text: str, client_id: str | None = None, **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"input": {"input": text}}
    if client_id:
        message["clientMessageId"] = client_id
    return {"action": "send", "message": message, **extra}
