"""The HTTP front (gateway/front.py) on an app of its own: idle lean connections are closed after
the keep-alive timeout, a handler that fails answers 500 (as aiohttp does) and leaves the
connection usable, and an app with a middleware is served by aiohttp alone (the front would skip
it); and, for any request a client may send, the front's answer is the one aiohttp's route
gives. The Lark and console routes through the front: tests/lark/test_front.py and
tests/test_console_api.py; hostile bytes through both: tests/test_fuzz.py."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.daemon import listen_sockets
from gateway.front import FrontSite
from gateway.webhook import HttpRequest, add_lean_route
from tests.helpers import RawConnection, free_port, raw_post

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


async def test_an_idle_lean_connection_is_closed_after_the_keepalive(
    front: tuple[FrontSite, int],
) -> None:
    site, port = front
    assert site.front is not None
    site.front.keepalive = 0.4
    conn = await RawConnection.open(port)
    conn.writer.write(raw_post("/hook/a1", b"{}"))
    status, headers, body = await conn.answer()
    assert (status, body, "server" in headers) == (200, b'{"id": "a1", "size": 2}', False)
    async with asyncio.timeout(5):
        assert await conn.reader.read() == b""  # closed by the front's sweep
    conn.close()


async def test_a_failing_handler_is_a_500_and_the_connection_goes_on(
    front: tuple[FrontSite, int],
) -> None:
    _site, port = front
    conn = await RawConnection.open(port)
    conn.writer.write(raw_post("/hook/a1", b'"fail"') + raw_post("/hook/a2", b'"stream"'))
    assert (await conn.answer())[0] == 500
    assert (await conn.answer())[0] == 500
    conn.writer.write(raw_post("/hook/a3", b"[1]"))
    status, _, body = await conn.answer()
    assert (status, body) == (200, b'{"id": "a3", "size": 3}')
    conn.close()


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
        conn = await RawConnection.open(port)
        conn.writer.write(raw_post("/hook/a1", b"{}"))
        status, headers, _ = await conn.answer()
        assert status == 200 and headers.get("x-tag") == "seen" and "server" in headers
        conn.close()
    finally:
        await runner.cleanup()


# --- the same answer either way (property) ---------------------------------------------------
async def mirror(request: HttpRequest) -> web.StreamResponse:
    """What the handler saw: path parameter, charset, headers (but framing), the body's hash."""
    body = await request.read()
    framing = ("content-length", "transfer-encoding")
    seen = {k.lower(): v for k, v in request.headers.items() if k.lower() not in framing}
    answer = {"id": request.match_info.get("id"), "charset": request.charset, "headers": seen,
              "body": hashlib.sha256(body).hexdigest(), "query": dict(request.query)}  # fmt: skip
    return web.json_response(answer, status=418 if body.startswith(b"!") else 200)


@pytest.fixture(scope="module")
def mirrored() -> Iterator[int]:
    """The mirror app served by the front, on a loop of its own (hypothesis runs synchronously)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="front-mirror", daemon=True)
    thread.start()
    app = web.Application()
    app.router.add_post("/m/{id}", mirror)
    add_lean_route(app, "/m/", mirror, param="id")
    runner, _site, port = asyncio.run_coroutine_threadsafe(serve(app), loop).result(10)
    yield port
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def exchange(port: int, data: bytes) -> tuple[int, bytes, bool]:
    """Status, body and whether aiohttp answered (its Server header), over a fresh socket."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body, b"\r\nServer:" in head


NAMES = ["X-Lark-Signature", "Content-Type", "X-A_b.c~!", "Accept", "User-Agent", "X-Empty"]
CTYPES = ["application/json", "APPLICATION/JSON; charset=UTF-8", "application/json; charset=utf-8"]
ows = st.sampled_from(["", " ", "\t", "  \t "])
inner = st.characters(min_codepoint=0x20, max_codepoint=0x7E) | st.just("\t")
value = st.text(inner, max_size=20)
field = st.tuples(st.sampled_from(NAMES), ows, value, ows).map(
    lambda t: (t[0].lower() if len(t[2]) % 2 else t[0], t[1] + t[2] + t[3])
)


@settings(max_examples=300, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    ident=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,12}", fullmatch=True),
    fields=st.lists(field, max_size=5, unique_by=lambda f: f[0].lower()),
    ctype=st.one_of(st.none(), st.sampled_from(CTYPES)),
    query=st.sampled_from(["", "?a=1", "?a=1&b=%20x"]),
    body=st.binary(max_size=300),
)
def test_the_front_answers_as_aiohttps_route_would(
    mirrored: int,
    ident: str,
    fields: list[tuple[str, str]],
    ctype: str | None,
    query: str,
    body: bytes,
) -> None:
    lines = [f"POST /m/{ident}{query} HTTP/1.1", "Host: t", "Connection: close"]
    lines += [f"{k}:{v}" for k, v in fields if k.lower() != "content-type"]
    if ctype is not None:
        lines.append(f"Content-Type: {ctype}")
    head = "\r\n".join(lines).encode()
    plain = head + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    chunked = head + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunked += (b"%x\r\n%s\r\n" % (len(body), body) if body else b"") + b"0\r\n\r\n"
    status, answer, by_aiohttp = exchange(mirrored, plain)
    assert exchange(mirrored, chunked)[:2] == (status, answer)
    assert by_aiohttp == bool(query)  # all else here is plain enough for the front
