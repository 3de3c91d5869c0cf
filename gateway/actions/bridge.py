"""One aiohttp request handed to an ASGI application (the MCP SDK's streamable HTTP transport,
which is Starlette) and its answer streamed back: the body is read by the gateway first (bounded),
so the application gets it whole; what it sends goes out as it comes (JSON, or an SSE stream).

Why a bridge rather than a second server: the MCP endpoint shares the gateway's port, its
body deadline and keep-alive bounds, its TLS terminator and its health checks (docs/mcp.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from aiohttp import web

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
AsgiApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def scope_of(request: web.Request, state: dict[str, Any]) -> Scope:
    """The ASGI HTTP scope of ``request``; ``state`` becomes the Starlette request's
    ``request.state`` (who the caller is)."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    sock = request.transport.get_extra_info("sockname") if request.transport else None
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.raw_path.split("?", 1)[0].encode("latin-1", "replace"),
        "query_string": request.query_string.encode("latin-1", "replace"),
        "root_path": "",
        "headers": [(k.lower(), v) for k, v in request.raw_headers],
        "client": tuple(peer[:2]) if isinstance(peer, tuple) else None,
        "server": tuple(sock[:2]) if isinstance(sock, tuple) else None,
        "state": state,
    }


async def serve(
    app: AsgiApp, request: web.Request, body: bytes, state: dict[str, Any]
) -> web.StreamResponse:
    """Run ``app`` for ``request`` (whose ``body`` was read already) and return its answer."""
    done = asyncio.Event()
    given = False
    response: web.StreamResponse | None = None

    async def receive() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()  # the request is over once the answer is
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal response
        if message["type"] == "http.response.start":
            response = web.StreamResponse(status=int(message["status"]))
            for name, value in message.get("headers", ()):
                response.headers.add(name.decode("latin-1"), value.decode("latin-1"))
            await response.prepare(request)
        elif message["type"] == "http.response.body" and response is not None:
            chunk = message.get("body", b"")
            if chunk:
                await response.write(chunk)

    try:
        await app(scope_of(request, state), receive, send)
    finally:
        done.set()
    if response is None:  # the application answered nothing: not the caller's fault
        return web.Response(status=500, text="no answer")
    await response.write_eof()
    return response
