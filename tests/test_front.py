"""The HTTP front (gateway/front.py) on an app of its own: idle lean connections are closed after
the keep-alive timeout, a handler that fails answers 500 (as aiohttp does) and leaves the
connection usable, and an app with a middleware is served by aiohttp alone (the front would skip
it). The Lark and console routes through the front: tests/lark/test_front.py and
tests/test_console_api.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web

from gateway.daemon import listen_sockets
from gateway.front import FrontSite
from gateway.webhook import HttpRequest, add_lean_route
from tests.helpers import free_port

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def echo(request: HttpRequest) -> web.StreamResponse:
    body = await request.read()
    if body == b'"fail"':
        raise RuntimeError("a handler bug")
    if body == b'"stream"':
        return web.StreamResponse()  # a streamed answer is no lean route's
    return web.json_response({"id": request.match_info["id"], "size": len(body)})


async def serve(app: web.Application) -> tuple[web.AppRunner, FrontSite, int]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    (sock,) = listen_sockets("127.0.0.1", port)
    site = FrontSite(runner, sock)
    await site.start()
    return runner, site, port


@pytest.fixture
async def front() -> AsyncIterator[tuple[FrontSite, int]]:
    app = web.Application()
    app.router.add_post("/hook/{id}", echo)
    add_lean_route(app, "/hook/", echo, param="id")
    runner, site, port = await serve(app)
    yield site, port
    await runner.cleanup()


def post(path: str, body: bytes) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


async def answer(reader: asyncio.StreamReader) -> tuple[int, bytes, bytes]:
    async with asyncio.timeout(10):
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        return int(head.split()[1]), head, await reader.readexactly(length)


async def test_an_idle_lean_connection_is_closed_after_the_keepalive(
    front: tuple[FrontSite, int],
) -> None:
    site, port = front
    assert site.front is not None
    site.front.keepalive = 0.4
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post("/hook/a1", b"{}"))
    status, head, body = await answer(reader)
    assert (status, body, b"Server:" in head) == (200, b'{"id": "a1", "size": 2}', False)
    async with asyncio.timeout(5):
        assert await reader.read() == b""  # closed by the front's sweep
    writer.close()


async def test_a_failing_handler_is_a_500_and_the_connection_goes_on(
    front: tuple[FrontSite, int],
) -> None:
    _site, port = front
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post("/hook/a1", b'"fail"') + post("/hook/a2", b'"stream"'))
    assert (await answer(reader))[0] == 500
    assert (await answer(reader))[0] == 500
    writer.write(post("/hook/a3", b"[1]"))
    status, _, body = await answer(reader)
    assert (status, body) == (200, b'{"id": "a3", "size": 3}')
    writer.close()


async def test_an_app_with_a_middleware_is_aiohttps_alone() -> None:
    @web.middleware
    async def tag(request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await handler(request)
        response.headers["X-Tag"] = "seen"
        return response

    app = web.Application(middlewares=[tag])
    app.router.add_post("/hook/{id}", echo)
    add_lean_route(app, "/hook/", echo, param="id")
    runner, site, port = await serve(app)
    try:
        assert site.front is None
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(post("/hook/a1", b"{}"))
        status, head, _ = await answer(reader)
        assert status == 200 and b"X-Tag: seen" in head and b"Server:" in head
        writer.close()
    finally:
        await runner.cleanup()
