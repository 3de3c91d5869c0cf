"""The HTTP front: the plainest webhook POSTs answered without aiohttp's request machinery, and
everything else handed to aiohttp, unchanged (issue 15).

aiohttp costs about 0.1 ms of CPU per webhook here (a ``Request``, its URL and headers objects,
the router, ``StreamResponse.prepare`` and its writer): a third of what the daemon spends on a
Lark event. The front is the listening socket's protocol. On a new connection it reads the first
request itself; when it is a POST to a *lean route* (``add_lean_route``) in the plainest form —

- the request line ``POST <prefix><id> HTTP/1.1``, the id as integration ids are spelled
  (``[A-Za-z0-9][A-Za-z0-9_.-]{0,63}``), no query;
- ASCII header lines ``Name: value``, no name twice, within 8 KB in all;
- one ``Content-Length`` within the app's ``client_max_size``; no ``Transfer-Encoding``,
  ``Content-Encoding``, ``Expect`` or ``Upgrade``; ``Connection`` absent, ``keep-alive`` or
  ``close``; ``Content-Type`` absent or ``application/json`` with at most ``charset=utf-8``

— it calls the route's handler (the same ``Webhook.handle`` aiohttp's router calls) with a
:class:`LeanRequest` and writes the answer, one request at a time, so pipelined answers keep
their order. The first request that is anything else (another path or method, a chunked or
compressed body, an oversized one, a header it does not take, bytes it does not parse) hands the
connection, with every byte not yet answered, to aiohttp's own ``RequestHandler``, which serves
it from then on as it serves every other connection: its parser, its refusals (400, 413, 404),
its routes. So the front answers only what aiohttp would answer the same way, and a request it
does not understand still gets aiohttp's answer.

The front is used only while the app has no middlewares and no ``on_response_prepare`` signal
(which it would skip). A lean connection idle for aiohttp's keep-alive timeout is closed, as
aiohttp closes its own; at shutdown idle connections close at once and busy ones after their
answer (within ``SHUTDOWN_S``).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from email.utils import formatdate
from typing import Any, cast

import structlog
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy, MultiDict, MultiDictProxy

log = structlog.get_logger("gateway.http")

Handler = Callable[["LeanRequest"], Awaitable[web.StreamResponse]]

MAX_HEAD = 8190  # the request line and headers together (aiohttp's per-line limit)
KEEPALIVE_S = 3630.0  # aiohttp's default keepalive_timeout
SHUTDOWN_S = 10.0  # how long shutdown waits for the answers being made
_ID = re.compile(rb"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VALUE = re.compile(rb"[\t\x20-\x7e]*")
_JSON_TYPES = frozenset({b"application/json", b"application/json; charset=utf-8"})
_REFUSED = frozenset({b"transfer-encoding", b"content-encoding", b"expect", b"upgrade"})
_LEAN_KEY = web.AppKey("lean_routes", dict)
_EMPTY_QUERY: MultiDictProxy[str] = MultiDictProxy(MultiDict())


class LeanRequest:
    """What a lean route's handler reads of its request (``gateway.webhook.HttpRequest``)."""

    __slots__ = ("_body", "charset", "headers", "match_info", "method", "path", "query")

    def __init__(self, path: str, match: dict[str, str], headers: CIMultiDict[str], body: bytes):
        self.method = "POST"
        self.path = path
        self.match_info = match
        self.headers = CIMultiDictProxy(headers)
        ctype = headers.get("Content-Type")
        self.charset = "utf-8" if ctype and "charset" in ctype else None
        self.query = _EMPTY_QUERY
        self._body = body

    async def read(self) -> bytes:
        return self._body


def add_lean_route(app: web.Application, prefix: str, param: str, handler: Handler) -> None:
    """Serve ``POST <prefix>{param}`` through the front too (the same handler must be on
    aiohttp's router for the requests the front hands over)."""
    routes = app.get(_LEAN_KEY)
    if routes is None:
        routes = app[_LEAN_KEY] = {}
    routes[prefix.encode()] = (param, handler)


def _http_date() -> bytes:
    return formatdate(usegmt=True).encode()


class Front:
    """The lean routes of one app and the connections the front still serves itself."""

    def __init__(self, server: web.Server, routes: dict[bytes, tuple[str, Handler]], max_body: int):
        self.server = server
        self.routes = routes
        self.max_body = max_body
        self.connections: set[FrontProtocol] = set()
        self.closing = False
        self._date = (0, b"")
        self._sweeper: asyncio.TimerHandle | None = None

    def __call__(self) -> asyncio.Protocol:  # the protocol factory for loop.create_server
        return FrontProtocol(self)

    def date(self) -> bytes:
        now = int(time.time())
        if now != self._date[0]:
            self._date = (now, _http_date())
        return self._date[1]

    def opened(self, conn: FrontProtocol) -> None:
        self.connections.add(conn)
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().call_later(60, self._sweep)

    def _sweep(self) -> None:
        self._sweeper = None
        idle_since = asyncio.get_running_loop().time() - KEEPALIVE_S
        for conn in list(self.connections):
            if conn.task is None and conn.seen < idle_since:
                conn.close()
        if self.connections:
            self._sweeper = asyncio.get_running_loop().call_later(60, self._sweep)

    async def close(self, within: float) -> None:
        """Shutdown: idle connections close now, busy ones once answered (within ``within`` s)."""
        self.closing = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        busy = [c.task for c in self.connections if c.task is not None]
        for conn in list(self.connections):
            if conn.task is None:
                conn.close()
        if busy:
            await asyncio.wait(busy, timeout=within)
        for conn in list(self.connections):
            conn.close()


class FrontProtocol(asyncio.Protocol):
    """One connection: lean until its first request the front does not take, then aiohttp's."""

    def __init__(self, front: Front) -> None:
        self.front = front
        self.transport: asyncio.Transport | None = None
        self.inner: asyncio.Protocol | None = None  # aiohttp's RequestHandler, once handed over
        self.buf = b""
        self.task: asyncio.Task[None] | None = None  # the request being answered
        self.seen = 0.0  # loop time of the last bytes received (idle connections are closed)
        self.eof = False
        self.paused = False

    # --- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.seen = asyncio.get_running_loop().time()
        self.front.opened(self)

    def data_received(self, data: bytes) -> None:
        if self.inner is not None:
            self.inner.data_received(data)
            return
        self.buf = self.buf + data if self.buf else data
        if self.task is None:
            self.seen = asyncio.get_running_loop().time()
            self._next()
        elif len(self.buf) > MAX_HEAD + self.front.max_body and not self.paused:
            assert self.transport is not None
            self.transport.pause_reading()  # pipelined far ahead: wait for the answer first
            self.paused = True

    def eof_received(self) -> bool | None:
        if self.inner is not None:
            return self.inner.eof_received()
        self.eof = True
        return True if self.task is not None else None  # keep the socket to answer first

    def connection_lost(self, exc: Exception | None) -> None:
        if self.inner is not None:
            self.inner.connection_lost(exc)
            return
        self.front.connections.discard(self)
        self.transport = None  # a request being answered finishes; its answer is dropped

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def close(self) -> None:
        self.front.connections.discard(self)
        if self.transport is not None:
            self.transport.close()

    # --- requests ------------------------------------------------------------------------------
    def _next(self) -> None:
        """Start answering the next buffered request, or hand the connection over."""
        buf = self.buf
        end = buf.find(b"\r\n\r\n", 0, MAX_HEAD)
        if end < 0:
            # Not (yet) a whole head: what cannot become a lean request goes to aiohttp at once
            # (it answers bytes that are no request, an over-long head, another route its way).
            if len(buf) >= MAX_HEAD or not self._may_be_lean(buf):
                self._hand_over()
            elif self.eof and self.transport is not None:
                self.close()  # the peer sent half a request and left
            return
        parsed = self._parse(buf, end)
        if parsed is None:
            self._hand_over()
            return
        path, match, headers, size, handler = parsed
        start = end + 4
        if len(buf) < start + size:
            return  # the rest of the body is on its way
        self.buf = buf[start + size :]
        request = LeanRequest(path, match, headers, buf[start : start + size])
        close = headers.get("Connection", "").lower() == "close"
        self.task = asyncio.get_running_loop().create_task(self._answer(handler, request, close))

    def _may_be_lean(self, buf: bytes) -> bool:
        if not buf.startswith(b"POST /"[: len(buf)]):
            return False
        line = buf.find(b"\r\n")
        if line < 0:
            return True
        target = buf[5:line].rpartition(b" ")[0]
        return target[: target.rfind(b"/") + 1] in self.front.routes

    def _parse(
        self, buf: bytes, end: int
    ) -> tuple[str, dict[str, str], CIMultiDict[str], int, Handler] | None:
        """The request's parts when the front takes it as it is; None to hand it over."""
        lines = buf[:end].split(b"\r\n")
        method, _, rest = lines[0].partition(b" ")
        target, _, version = rest.partition(b" ")
        if method != b"POST" or version != b"HTTP/1.1":
            return None
        cut = target.rfind(b"/") + 1
        route = self.front.routes.get(target[:cut])
        if route is None or _ID.fullmatch(target, cut) is None:
            return None
        headers: CIMultiDict[str] = CIMultiDict()
        names: set[bytes] = set()
        size = -1
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            lower = name.lower()
            if not colon or lower in names or lower in _REFUSED or _TOKEN.fullmatch(name) is None:
                return None
            value = value.strip(b" \t")
            if _VALUE.fullmatch(value) is None:
                return None
            names.add(lower)
            if lower == b"content-length":
                if not value.isdigit() or len(value) > 12:
                    return None
                size = int(value)
            elif lower == b"content-type" and value.lower() not in _JSON_TYPES:
                return None
            elif lower == b"connection" and value.lower() not in (b"keep-alive", b"close"):
                return None
            headers.add(name.decode("ascii"), value.decode("ascii"))
        if not 0 <= size <= self.front.max_body:
            return None
        param, handler = route
        path = target.decode("ascii")
        return path, {param: path[cut:]}, headers, size, handler

    async def _answer(self, handler: Handler, request: LeanRequest, close: bool) -> None:
        try:
            try:
                response = await handler(request)
            except web.HTTPException as exc:
                response = exc
            except Exception:  # as aiohttp: a 500 and the traceback in the log
                log.exception("error handling request", path=request.path)
                response = web.Response(status=500, text="500 Internal Server Error")
            close = close or self.front.closing
            self._write(response, close)
        except Exception:  # an answer that cannot be written: the connection goes
            log.exception("lean answer not written", path=request.path)
            close = True
            self.close()
        finally:
            self.task = None
        if self.transport is None or close or self.front.closing:
            return
        self.seen = asyncio.get_running_loop().time()
        if self.paused:
            self.paused = False
            self.transport.resume_reading()
        if self.buf:
            self._next()
        elif self.eof:
            self.close()

    def _write(self, response: web.StreamResponse, close: bool) -> None:
        if self.transport is None:
            return
        body = response.body if isinstance(response, web.Response) else None
        if not isinstance(body, bytes):  # a streamed answer: not what a lean route gives
            log.error("lean route answered without a body", type=type(response).__name__)
            response, body = web.Response(status=500), b"500 Internal Server Error"
        head = [b"HTTP/1.1 %d %s" % (response.status, response.reason.encode("latin-1"))]
        for name, value in response.headers.items():
            if name.lower() != "content-length":
                head.append(f"{name}: {value}".encode("latin-1"))
        head.append(b"Content-Length: %d" % len(body))
        head.append(b"Date: " + self.front.date())
        if close:
            head.append(b"Connection: close")
        self.transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
        if close:
            self.close()

    def _hand_over(self) -> None:
        """From now on aiohttp serves this connection, starting with the bytes not answered."""
        if self.task is not None or self.transport is None:
            return  # after the answer being made (``_answer`` calls ``_next`` again)
        self.front.connections.discard(self)
        inner = self.inner = self.front.server()
        inner.connection_made(self.transport)
        if self.paused:
            self.paused = False
            self.transport.resume_reading()
        buf, self.buf = self.buf, b""
        if buf:
            inner.data_received(buf)
        if self.eof:
            inner.eof_received()


def lean_routes(app: web.Application) -> dict[bytes, tuple[str, Handler]]:
    """The app's lean routes, or none when something would run that the front skips."""
    routes: dict[bytes, tuple[str, Handler]] = app.get(_LEAN_KEY, {})
    if app.middlewares or len(app.on_response_prepare) or not routes:
        return {}
    return routes


class FrontSite(web.SockSite):
    """``web.SockSite`` with the front as the protocol (a plain SockSite without lean routes)."""

    __slots__ = ("front",)

    def __init__(self, runner: web.AppRunner, sock: Any) -> None:
        super().__init__(runner, sock)
        assert runner.server is not None
        routes = lean_routes(runner.app)
        size = runner.app._client_max_size
        self.front = Front(runner.server, routes, size) if routes else None

    async def start(self) -> None:
        if self.front is None:
            await super().start()
            return
        self._runner._reg_site(self)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self.front, sock=self._sock, backlog=self._backlog)

    async def stop(self) -> None:
        await super().stop()
        if self.front is not None:
            await self.front.close(within=SHUTDOWN_S)
